"""The Kafka runtime: workers, the commit cycle, state restoration and the local engine."""

from fluvial.metrics import WorkerMetrics
from fluvial.runtime.deployments import DeploymentPolicy
from fluvial.runtime.engine import Application, assign_slots, plan_tasks

__all__ = ["Application", "DeploymentPolicy", "WorkerMetrics", "assign_slots", "plan_tasks"]
