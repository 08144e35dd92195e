"""Slurm: the deployment as jobs on a cluster instead of units on hosts.

- ``commands``: how sbatch, squeue, sacct, scontrol and scancel are invoked (argv builders)
- ``parse``: what they print, read (pure)
- ``script``: the job script of a service, from its ``job:`` and ``launch:`` blocks (pure)
- ``cluster``: a private one-node cluster of this machine (tests and ``pdtui demo --slurm``)
"""
