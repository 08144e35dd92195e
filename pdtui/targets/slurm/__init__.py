"""Slurm: services as jobs on a cluster instead of units on hosts.

- ``commands``: how sbatch, squeue, sacct, scontrol and scancel are invoked (argv builders)
- ``parse``: what they print, read (pure)
- ``script``: the job script of a service, from its ``job:`` and ``launch:`` blocks (pure)
- ``cluster_session``: the cluster's login host: its commands and looks, shared by the jobs
- ``job_output``: a job's output file followed as its log
- ``job_run``: one service's run as a job (submit or attach, queue, then judged as a unit's run)
"""
