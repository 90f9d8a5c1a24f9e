"""`external`: an agent in the user's own code (external rollouts). It never rolls out here: the loop takes its
groups from the user's process (training/rl/external.py, the loop's second rollout source). Registered so that an
agent can name it and its options are checked like any environment's."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from training.environments import register
from training.environments.base import Environment, RolloutConfig
from training.types import Scenario, TrainingError, Trajectory


class ExternalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    group_timeout_s: float = Field(600.0, gt=0, le=7 * 24 * 3600, description="How long a step waits for its "
                                   "groups, from the moment it asks for them (paused time not counted).")
    on_missing: Literal["skip", "fail"] = Field("skip", description="skip: a group that did not come counts as "
                                                "failed rollouts and the step trains on the groups that came "
                                                "(within max_rollout_failures); fail: the run fails.")
    allow_unsampled: bool = Field(False, description="Accept assistant turns the model never sampled through "
                                  "the run's endpoint; they train on a re-tokenisation of their text.")
    upstream_timeout_s: float | None = Field(None, gt=0, le=24 * 3600, description="How long the run's endpoint "
                                             "waits for the inference server's answer to one call (504 after); "
                                             "None: the deployment's maximum, STUDIO_EXTERNAL_UPSTREAM_TIMEOUT_S, "
                                             "which also caps it.")


@register("external")
class ExternalEnvironment(Environment):
    """An agent in the user's own code: it never rolls out here (see ExternalRollouts)."""

    Options = ExternalOptions

    async def rollout(self, client: Any, model: str, scenario: Scenario, config: RolloutConfig) -> Trajectory:
        raise TrainingError("an external agent rolls out in its own process: its trajectories come through the "
                            "run's endpoint and are submitted as groups (docs/your-agent.md)")

    @classmethod
    def has_own_reward(cls, options: dict[str, Any]) -> bool | None:
        return None  # the client may send rewards of its own, or leave them to the judge
