"""What cloudopt hands a platform, as one set: the single-pod Job and its VPA, the Kubeflow
``TrainJob`` and the Ray Train job of a data-parallel pick (:mod:`.outputs`), written from
one description of the recommended job so they never disagree; the admission rules of
Kubeflow Trainer's webhook that a ``TrainJob`` must pass (:mod:`.trainer_rules`); the Ray
Train script (:mod:`.ray_job`)."""

from optimizer.reports.cluster.outputs import JobShape, job_command, write_cluster_outputs
from optimizer.reports.cluster.ray_job import ray_train_job_source
from optimizer.reports.cluster.trainer_rules import trainjob_admission_errors

__all__ = ["JobShape", "job_command", "ray_train_job_source", "trainjob_admission_errors",
           "write_cluster_outputs"]
