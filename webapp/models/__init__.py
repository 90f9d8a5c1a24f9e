from webapp.models.catalogue import Agent, JudgeConfig, Rubric, RubricVersion, Scenario, ScenarioSet
from webapp.models.datasets import Dataset, DatasetRow, DatasetVersion, Distillation, DistillationDraft
from webapp.models.external import (
    ExternalCall, ExternalClient, ExternalGroup, ExternalTrajectory, ProjectToken,
)
from webapp.models.mcp import McpServer
from webapp.models.notifications import (Delivery, Notification, NotificationPreference, NotifyEvent, Webhook,
                                         WebhookFormat)
from webapp.models.projects import Membership, Project, Role
from webapp.models.review import Rescore, ScoreOverride
from webapp.models.serving import ModelExport, ProjectServer, TrySession
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
    "Agent", "Checkpoint", "Dataset", "DatasetRow", "DatasetVersion", "Distillation", "DistillationDraft",
    "ExternalCall", "ExternalClient", "ExternalGroup", "ExternalTrajectory", "ProjectServer", "ProjectToken",
    "JudgeCall", "JudgeConfig", "McpServer", "Membership", "ModelExport", "Project", "Role", "Rubric",
    "RubricVersion", "Rescore", "Run", "ScoreOverride", "RunEvent", "RunStatus", "Scenario", "ScenarioSet", "Step", "Trajectory",
    "TrajectoryGroup", "TrySession",
    "Delivery", "Notification", "NotificationPreference", "NotifyEvent", "Webhook", "WebhookFormat",
]
