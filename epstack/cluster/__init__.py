"""`epstack cluster`: the built image, by digest, as Kubernetes and Slurm jobs, and pre-pull plans.

One concept a module:
  image     the pins' target and its image by digest: --image, or the build manifest's entry
  jobs      what a job runs on each node (elastic smoke, serve): command, env, ports, readiness
  servesmoke  the serve smoke a serve job runs against its own endpoint (`epstack smoke serve --url`)
  site      a site's settings: storage, secrets by reference, environment, network, scheduling,
            privileges (flag values)
  modelfetch  the model's one download (or the tiny one's write) into its volume, under a lock file, before
              the servers start
  k8s       Kubernetes objects: indexed Job + headless Service, LeaderWorkerSet, the serve smoke's Job,
            PodMonitor, pre-pull DaemonSet
  k8smodel  the model's shared claim, its fetch Job and the serve pods' init containers (Kubernetes)
  k8sparts  the pieces those objects share: labels, literal text, secrets by reference, volumes
  router    SGLang's router (smg) in front of a serve job's groups: a Deployment, or a Slurm step
  kustomize the kustomize base beside the manifests, headed by a site overlay's patch points
  slurm     sbatch scripts (pyxis/enroot; a serve job's smoke as a step on node 0) and enroot imports
  yamltext  a small deterministic YAML writer for the manifests
The serve plan and a node's SGLang command come from the serve smoke (epstack.smoke.serving).
(epstack.commands.cluster parses `cluster render`, `cluster prepull` and `cluster metrics` and writes what
these return; epstack.metrics turns a report into OpenMetrics text.)
"""
