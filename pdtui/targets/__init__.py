"""Where services run: one package per target, each the only place that knows its kind.

- ``systemd``: units on hosts reached over SSH (or this machine): systemctl, the journal, unit files
- ``slurm``: jobs on a cluster reached through its login host: sbatch, squeue/sacct, the job's output file

What the engine needs of a target (look at a service, start it, follow its output as
:class:`pdtui.engine.log_entry.LogEntry` lines, stop it, where it was placed) is written
in pdtui/engine; a target never imports the UI or the sim.
"""
