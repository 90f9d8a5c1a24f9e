from webapp.models.catalogue import Agent, JudgeConfig, Rubric, RubricVersion, Scenario, ScenarioSet
from webapp.models.external import (
    ExternalCall, ExternalClient, ExternalGroup, ExternalTrajectory, ProjectToken,
)
from webapp.models.projects import Membership, Project, Role
from webapp.models.review import Rescore, ScoreOverride
from webapp.models.runs import (
    Checkpoint,
    JudgeCall,
    Run,
    RunEvent,
    RunStatus,
    Step,
    Trajectory,
    TrajectoryGroup,
)

__all__ = [
    "Agent", "Checkpoint", "ExternalCall", "ExternalClient", "ExternalGroup", "ExternalTrajectory",
    "ProjectToken", "JudgeCall", "JudgeConfig", "Membership", "Project", "Role", "Rubric",
    "RubricVersion", "Rescore", "Run", "ScoreOverride", "RunEvent", "RunStatus", "Scenario", "ScenarioSet", "Step", "Trajectory",
    "TrajectoryGroup",
]
