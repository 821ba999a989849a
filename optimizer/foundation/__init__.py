"""The foundation: what every part of cloudopt may import, and which imports none of them.

Typed ``@dataclass`` configurations read from TOML (:mod:`~optimizer.foundation.config`), the
user-facing error classes (:mod:`~optimizer.foundation.errors`), the :class:`Allocation` a trial or
an environment step runs with (:mod:`~optimizer.foundation.allocation`), the job a command line
describes and the main job's typed result (:mod:`~optimizer.foundation.job`,
:mod:`~optimizer.foundation.result`), atomic writes and strict
JSON reads (:mod:`~optimizer.foundation.atomic_files`), NVML queries that treat "no GPU" as normal
(:mod:`~optimizer.foundation.gpu`) and the start-up guard against shadowing packages
(:mod:`~optimizer.foundation.install_check`). It may import only itself (and third-party
libraries): ``phases``, ``envs`` and ``agents`` import it, so anything of the orchestrator here
would turn the one-way house into a loop.
"""
