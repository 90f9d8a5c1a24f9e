"""`python manage.py studio_demo`: a working Rubric Studio on this machine in one command.

Creates a demo user and project (credentials printed), builds the tiny offline model, launches the demo run
(the tiny model learns 2048 moves) and prints the URL. With JUDGE_MODEL set (plus JUDGE_API_BASE and/or
JUDGE_API_KEY_ENV) the run is scored by that judge; otherwise it trains on the game's verifiable reward.
With --serve it then serves the app (daphne) so the run can be watched live; the in-process executor runs it.

The settings (judge variables, the model catalogue) are checked before anything is created, so a start that
stops leaves no demo user behind whose password nobody saw. A later start that finds the demo user says how to
get in: DEMO_PASSWORD sets that password on every start, and --new-password prints a new one.
"""
from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from webapp.egress_policy import egress_refusal
from webapp.execution.executors import hold_submissions
from webapp.judge_keys import judge_key_refusal
from webapp.models import Agent, JudgeConfig, Project, Rubric, Scenario, ScenarioSet
from webapp.services import catalogue
from webapp.services.projects import project_create
from webapp.services.runs import run_launch

DEMO_USER = "demo"
DEMO_RUBRIC = ("Score each attempt at the 2048 move. A legal move that keeps the board open beats an illegal or "
               "malformed one; answers must use the requested format and nothing else.")


class Command(BaseCommand):
    help = "Create a demo user and project, build the tiny model and launch the demo run."

    def add_arguments(self, parser):
        parser.add_argument("--steps", type=int, default=30)
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--model-dir", default=str(settings.BASE_DIR / "var" / "tiny-model"))
        parser.add_argument("--serve", action="store_true", help="Serve the app after launching (daphne).")
        parser.add_argument("--new-password", action="store_true",
                            help="Give the demo user a new password and print it (DEMO_PASSWORD, or a random one).")

    @staticmethod
    def _catalogue_name(model_path: Path) -> str:
        """The deployment's name for the built model: agents name models of the catalogue, never a directory."""
        for name, entry in settings.STUDIO_BASE_MODELS.items():
            if Path(entry.source) == model_path.resolve() or entry.source == str(model_path):
                return name
        raise CommandError(f"{model_path} is not in this deployment's models: list it in STUDIO_BASE_MODELS, e.g. "
                           f'{{"my-tiny": {{"source": "{model_path.resolve()}", "context_length": 1024}}}}')

    @staticmethod
    def _check_settings(model_path: Path) -> str:
        """Everything the environment decides, checked before the first row or file is made: the model's name in
        the catalogue, and the judge's variables. Returns the model's catalogue name."""
        model_name = Command._catalogue_name(model_path)
        if not (model := os.environ.get("JUDGE_MODEL")):
            return model_name
        key_env, api_base = os.environ.get("JUDGE_API_KEY_ENV", ""), os.environ.get("JUDGE_API_BASE", "")
        if key_env and not os.environ.get(key_env):
            raise CommandError(f"JUDGE_API_KEY_ENV names {key_env!r}, but that variable is not set: set it to the "
                               f"key of the judge {model!r}, or unset JUDGE_MODEL to score by the game's reward")
        if refusal := judge_key_refusal(api_key_env=key_env, api_base=api_base):
            raise CommandError(f"JUDGE_API_KEY_ENV={key_env!r} with JUDGE_API_BASE={api_base!r}: {refusal}")
        if refusal := egress_refusal(api_base):
            raise CommandError(f"JUDGE_API_BASE={api_base!r}: {refusal}")
        return model_name

    def handle(self, *args, steps: int, host: str, port: int, model_dir: str, serve: bool, new_password: bool,
               **options):
        from training.fixtures.demo import demo_config
        from training.fixtures.tiny_model import ensure_tiny_model

        model_name = self._check_settings(Path(model_dir))
        call_command("migrate", verbosity=0, interactive=False)
        if serve:
            hold_submissions()  # the server process started below picks the queued run up
        self.stdout.write("Building the tiny offline model (cached after the first time)…")
        model_path = ensure_tiny_model(Path(model_dir))
        demo = demo_config(out_dir="unused", steps=steps, model_dir=model_path)
        # The user is made in the same transaction as the run: a launch that fails leaves no user behind.
        with transaction.atomic():
            user, password = self._user(new_password=new_password)
            project = Project.objects.filter(owner=user, name="Demo").first() or project_create(
                owner=user, name="Demo", description="The tiny offline model learning to play 2048 moves.")
            agent = Agent.objects.filter(project=project, name="2048 player").first() or catalogue.agent_create(
                user=user, project=project, name="2048 player", base_model=model_name,
                system_prompt=demo.system_prompt, environment_kind=demo.environment.kind,
                environment_options=demo.environment.options, temperature=demo.sampling.temperature,
                top_p=demo.sampling.top_p, max_tokens=demo.sampling.max_tokens)
            scenario_set = ScenarioSet.objects.filter(project=project, name="2048 games").first()
            if scenario_set is None:
                scenario_set = catalogue.scenario_set_create(user=user, project=project, name="2048 games")
                held_out = set(demo.evaluation.held_out_ids)  # validation split = held out for evaluation
                Scenario.objects.bulk_create(
                    Scenario(scenario_set=scenario_set, external_id=s.id, user_message=s.user_message,
                             metadata=s.metadata,
                             split=Scenario.Split.VALIDATION if s.id in held_out else Scenario.Split.TRAIN)
                    for s in demo.scenarios)
            judge, rubric_version = self._judge(user, project)
            try:
                run = run_launch(
                    user=user, project=project, name=f"demo-{project.runs.count() + 1}", agent=agent,
                    scenario_set=scenario_set, rubric_version=rubric_version, judge_config=judge, steps=steps,
                    group_size=demo.grpo.group_size, groups_per_step=demo.grpo.groups_per_step,
                    learning_rate=demo.grpo.learning_rate, seed=demo.seed,
                    overrides={"lora": demo.lora.model_dump(),
                               "grpo": {"micro_batch_size": demo.grpo.micro_batch_size,
                                        "max_grad_norm": demo.grpo.max_grad_norm},
                               "evaluation": {"every": demo.evaluation.every, "samples": demo.evaluation.samples}})
            except ValidationError as err:  # e.g. the judge named by JUDGE_MODEL does not answer
                raise CommandError("the demo run was not launched: " + " ".join(err.messages)) from None
        url = f"http://{host}:{port}/runs/{run.id}/"
        self.stdout.write(self.style.SUCCESS("Rubric Studio demo"))
        self.stdout.write(f"  user:     {user.username}")
        self.stdout.write(f"  password: {password}" if password else
                          "  password: (set on the first start, not shown again); to get in, start with "
                          "--new-password to print a new one (manage.py studio_demo --new-password --serve), or "
                          "with DEMO_PASSWORD set to the one you want (DEMO_PASSWORD=... make demo)")
        self.stdout.write(f"  run:      {url}")
        self.stdout.write("  scoring:  " + (f"judge {judge.model}" if judge else
                                            "the game's verifiable reward (no JUDGE_MODEL set)"))
        self.stdout.write(f"  executor: {settings.STUDIO_EXECUTOR}"
                          + ("" if settings.STUDIO_EXECUTOR == "inprocess" else " (start a worker on queue gpu)"))
        if not serve and settings.STUDIO_EXECUTOR == "inprocess":
            self._follow(run.id)
        if serve:
            self.stdout.write(f"Serving on http://{host}:{port}/ (Ctrl-C to stop)…")
            # The interpreter running this command, not a `daphne` on PATH: `make demo` does not activate the venv.
            os.execv(sys.executable, [sys.executable, "-m", "daphne", "-b", host, "-p", str(port),
                                      "webapp.asgi:application"])

    def _follow(self, run_id: int) -> None:
        """Without a server, this process is the executor: show a live progress line until the run ends."""
        import time

        from webapp.models import Run

        while True:
            run = Run.objects.get(pk=run_id)
            self.stdout.write(f"\r  {run.status:<10} step {run.steps_done}/{run.total_steps}  {run.phase[:60]:<60}",
                              ending="")
            self.stdout.flush()
            if run.status not in ("queued", "running", "paused", "awaiting_review"):
                self.stdout.write("")
                if run.error:
                    raise CommandError(run.error)
                return
            time.sleep(1.0)

    def _user(self, *, new_password: bool):
        """The demo user and the password to print: None when it keeps one set on an earlier start."""
        users = get_user_model()
        user = users.objects.filter(username=DEMO_USER).first()
        chosen = os.environ.get("DEMO_PASSWORD")
        if user is None:
            password = chosen or secrets.token_urlsafe(9)
            return users.objects.create_user(username=DEMO_USER, password=password), password
        if not (new_password or chosen):
            return user, None
        password = chosen or secrets.token_urlsafe(9)
        user.set_password(password)
        user.save(update_fields=["password"])
        return user, password

    def _judge(self, user, project):
        model = os.environ.get("JUDGE_MODEL")
        if not model:
            return None, None
        key_env = os.environ.get("JUDGE_API_KEY_ENV", "")  # checked in _check_settings
        judge = JudgeConfig.objects.filter(project=project, model=model).first() or catalogue.judge_config_create(
            user=user, project=project, name=f"judge {model}"[:200], model=model,
            api_base=os.environ.get("JUDGE_API_BASE", ""), api_key_env=key_env)
        rubric = Rubric.objects.filter(project=project, name="2048 moves").first() or catalogue.rubric_create(
            user=user, project=project, name="2048 moves", text=DEMO_RUBRIC)
        return judge, rubric.latest_version
