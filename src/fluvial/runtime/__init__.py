"""The Kafka runtime: workers, the commit cycle, state restoration and the local engine."""

from fluvial.runtime.deployments import DeploymentPolicy
from fluvial.runtime.engine import Application, assign_slots, plan_tasks
from fluvial.runtime.metrics import WorkerMetrics

__all__ = ["Application", "DeploymentPolicy", "WorkerMetrics", "assign_slots", "plan_tasks"]
