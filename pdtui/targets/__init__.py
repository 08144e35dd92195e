"""Where services run: one package per target, each the only place that knows its kind.

- ``systemd``: units on hosts reached over SSH (or this machine): systemctl, the journal, unit files
- ``slurm``: jobs on a cluster reached through its login host: sbatch, squeue/sacct, the job's output file
- ``registry``: which target each service and each place (host, cluster) of the config belongs to

Each target declares its settings of the config (its ``settings`` module: its section of places and the keys of a
service on one, a :class:`pdtui.config.PlacementKind`); importing this package registers them, systemd's first,
so the config's core knows none of them.

A new target (Kubernetes, say) is a package here that implements:

- a session per place: a :class:`pdtui.engine.session.Session` (the place's connection, commands
  within a deadline, HTTP probes through it) with :meth:`~pdtui.engine.session.Session.preflight`
  (look at its services before anything starts, through a Reacher that tries again while the place
  cannot be reached; fail those that cannot be brought up) and, where one stream carries all its
  services' output, :meth:`~pdtui.engine.session.Session.follow` (each line read into a
  :class:`pdtui.engine.log_entry.LogEntry` and handed to its run's ``lines.take``), and a ``looker`` whose
  ``last_took`` says how long its last look took (a slow place is looked at less often);
- a service's run: a :class:`pdtui.engine.service_run.ServiceRun` subclass that starts or attaches,
  looks at the service (``_check_unit``: its ``attempt.unit_problem`` once it is over), stops it,
  says where it was placed (``placed``, ``names_for``, ``url_for``: the URL a router reaches it at),
  draws itself (``info``) and closes what it
  follows of its own (``close``), as targets/slurm/job_run.py does;
- its settings of the config: a ``settings`` module with its :class:`pdtui.config.PlacementKind` (its section of
  places, the model of one, its keys of a service with their validation), registered below;
- its lines in registry.py's ``Registry``: which services are its (``new_run``) and its sessions
  (``open_sessions``); the commands hand the orchestrator a ``Registry`` (the engine imports no target).

The orchestrator never asks which kind of target a service runs on (tests/unit/test_layers.py),
and a target never imports another target, the UI or the sim. tests/unit/test_toy_target.py is a
whole third target in one file, brought up by the orchestrator unchanged.
"""

from pdtui.config.placement import register, registered
from pdtui.targets.slurm.settings import JOBS
from pdtui.targets.systemd.settings import UNITS

for _kind in (UNITS, JOBS):     # in this order, the order of their sections and keys in errors and the schema
    register(_kind)
PLACEMENTS = registered()
"""The kinds of place of every target: what a config is read with."""
