"""Every option name of every command and its one meaning, as data: docs/reference/options.md is
written from it (epstack.commands.clireference), and `conflicts` (run by tests/commands/test_meanings.py)
refuses a parser that uses a name with another meaning: a flag where it takes a value, a fixed set of
choices where it takes free text (or the reverse), another value name (metavar) where one is fixed (so
`--out` is a FILE and `--out-dir` a DIR everywhere), or a name retired for another (RETIRED: `--nodes`,
`--gpus-per-node` are the one name of their concept)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, kw_only=True)
class Meaning:
    text: str
    # flag: takes no value; choice: one of a fixed set (a command may offer fewer); value: free text.
    takes: Literal["flag", "choice", "value"] = "value"
    metavar: str | None = None  # the value's name in usage lines, where the meaning fixes one


def _flag(text: str) -> Meaning:
    return Meaning(text=text, takes="flag")


def _choice(text: str) -> Meaning:
    return Meaning(text=text, takes="choice")


SECONDS = "seconds before it is stopped"

MEANINGS: dict[str, Meaning] = {
    "--version": _flag("print epstack's version and exit"),
    "--quiet": _flag("print only errors and warnings"),
    "--verbose": _flag("print more: every command run"),
    # The five names the issue found with several meanings, each now with one.
    "--target": Meaning(text="image target: ARCH-FABRIC of pins.env, e.g. hopper-ib", metavar="TARGET"),
    "--arch": Meaning(text="GPU architecture of an image target, e.g. hopper", metavar="ARCH"),
    "--cuda-arch": Meaning(
        text="CUDA architecture to compile for, e.g. 9.0a (TORCH_CUDA_ARCH_LIST)", metavar="ARCH"
    ),
    "--json": Meaning(text="write the command's JSON document to FILE (- for stdout)", metavar="FILE"),
    "--profile": _choice("model profile: deepseek-v3, qwen3-30b-a3b or tiny"),
    "--platform": _choice("scheduler: k8s (Kubernetes objects) or slurm (sbatch scripts)"),
    "--image-tag": Meaning(text="an image's tag", metavar="TAG"),
    "--nccl-version": Meaning(text="an NCCL version, e.g. 2.30.7", metavar="VERSION"),
    # Inputs and outputs.
    "--pins": Meaning(text="the pins file (default $EPSTACK_PINS or ./pins.env)", metavar="FILE"),
    "--locks": Meaning(text="the lock folder"),
    "--out": Meaning(text="the file the command writes its result to, whole or not at all", metavar="FILE"),
    "--out-dir": Meaning(text="the folder the command writes its results into", metavar="DIR"),
    "--report": Meaning(text="a JSON report: the one `build` writes, the one `cluster metrics` reads"),
    "--build-report": Meaning(text="a build report `epstack build --report` wrote", metavar="FILE"),
    "--summary": Meaning(text="also write the result as Markdown to FILE", metavar="FILE"),
    "--manifest": Meaning(text="a build manifest (JSON) naming the built images"),
    "--values": Meaning(
        text="a values file (YAML) of the command's settings; flags given too win", metavar="FILE"
    ),
    "--validate": Meaning(text="only validate FILE", metavar="FILE"),
    "--check": _flag("verify instead of writing: exit 1 on any difference, write nothing"),
    "--compare": Meaning(text="exit 1 unless FILE equals what the command would write", metavar="FILE"),
    "--sources": Meaning(text="a folder of `git archive` tarballs and installers (no network)"),
    "--source": Meaning(text="a source tree"),
    "--run-dir": Meaning(text="a folder for the run's own files and logs (default: a temporary one)"),
    "--model-cache": Meaning(text="a folder a generated model is written into once and reused from"),
    "--wheel-dir": Meaning(text="the folder a wheel and its manifest go to"),
    "--into": Meaning(text="the folder to unpack into"),
    "--root": Meaning(text="read /proc and /sys under this folder"),
    "--export": Meaning(text="a kernels export (`jit export`)"),
    "--export-jit-cache": Meaning(text="pack the JIT kernels compiled into FILE (tar.gz)", metavar="FILE"),
    "--server-log": Meaning(text="a server's log file"),
    "--env-file": Meaning(text="a file of KEY=VALUE lines"),
    # Images and registries.
    "--image": Meaning(text="an image reference: REPOSITORY[:TAG][@sha256:DIGEST]"),
    "--base-image": Meaning(text="the image an image is built FROM"),
    "--tag": Meaning(text="the tag of the image the command builds"),
    "--layer": _choice("an image layer: base, deepep, sglang (all: every one)"),
    "--fabric": _choice("network fabric: efa or ib"),
    "--registry": Meaning(text="an image registry: HOST[:PORT][/NAMESPACE]"),
    "--cache-registry": Meaning(text="a registry for BuildKit's layer cache"),
    "--push": _choice("which built images to push"),
    "--sha256": Meaning(text="the expected sha256 of a file"),
    "--min-free-gb": Meaning(text="refuse to start with less free disk (GB)"),
    # Pins and locks.
    "--digest": Meaning(text="an image pin whose digest to refresh"),
    "--all-digests": _flag("refresh every image pin's digest"),
    "--group": Meaning(text="a group of pins moved as one"),
    "--candidates": Meaning(text="how many newer releases to resolve"),
    "--open-pr": _flag("commit, push and open a pull request"),
    "--base": Meaning(text="the git branch a pull request merges into"),
    "--remote": Meaning(text="the git remote to push to"),
    "--dry-run": _flag("check and print; write nothing"),
    "--upgrade": Meaning(text="a locked package to move"),
    # Checks.
    "--record": _flag("record what decided a passing guard, for --at-start"),
    "--at-start": _flag("a container start: trust the build's record where nothing changed"),
    "--loaded": _flag("check the library torch loads in this Python"),
    "--library": Meaning(text="a built shared library"),
    "--cuda": Meaning(text="a CUDA version, e.g. 13.0"),
    "--toolchain": _choice("a JIT toolchain"),
    "--ship": _flag("an image build: keep what compiles without a GPU"),
    "--ship-into": Meaning(text="the folder --ship keeps the compiled caches in", metavar="FOLDER"),
    "--rules": _choice("which rules to check by"),
    # The smoke: shape and run.
    "--hidden": Meaning(text="the model's hidden size"),
    "--num-topk": Meaning(text="experts each token is routed to"),
    "--num-experts": Meaning(text="routed experts in all"),
    "--num-tokens": Meaning(text="tokens per rank"),
    "--num-max-tokens-per-rank": Meaning(text="ElasticBuffer's num_max_tokens_per_rank"),
    "--buffer-num-topk": Meaning(text="the num_topk given to ElasticBuffer"),
    "--mode": _choice("DeepEP's mode: direct, hybrid or auto"),
    "--seed": Meaning(text="the random seed"),
    "--masked-ratio": Meaning(text="share of masked (-1) top-k slots"),
    "--hot-rank-ratio": Meaning(text="how much likelier rank 0's experts are"),
    "--iters": Meaning(text="timed calls per operation"),
    "--skip-bench": _flag("skip the timed calls"),
    "--prefer-overlap-with-compute": _flag("ElasticBuffer's prefer_overlap_with_compute"),
    "--timeout": Meaning(text=SECONDS),
    "--init-timeout": Meaning(text=f"{SECONDS}: rendezvous and NCCL init"),
    "--upstream-timeout": Meaning(text=f"{SECONDS}: DeepEP's own test_ep"),
    "--health-timeout": Meaning(text=f"{SECONDS}: the server's start"),
    "--request-timeout": Meaning(text=f"{SECONDS}: one request"),
    "--level-timeout": Meaning(text=f"{SECONDS}: one sweep level"),
    "--startup-timeout": Meaning(text=f"{SECONDS}: the server's start (k8s startup probe)"),
    "--node-rank": Meaning(text="this node's rank"),
    "--master-addr": Meaning(text="the rendezvous host"),
    "--master-port": Meaning(text="the rendezvous port"),
    "--upstream-tests": Meaning(text="a DeepEP checkout whose test_ep to run too"),
    "--upstream-only": _flag("run only DeepEP's test_ep"),
    "--upstream-args": Meaning(text="extra test_ep.py arguments"),
    "--min-bandwidth-ratio": Meaning(text="the least smoke / test_ep bandwidth that passes"),
    # Serving.
    "--model-path": Meaning(text="model weights: a path or a hub id"),
    "--a2a": _choice("the MoE all-to-all backend"),
    "--sglang-arg": Meaning(text="an SGLang flag to add", metavar="FLAG"),
    "--vllm-arg": Meaning(text="a vLLM flag to add", metavar="FLAG"),
    "--engine": _choice("the serving engine: sglang or vllm (build: all, every engine's image)"),
    "--url": Meaning(text="a running server's URL"),
    "--no-compare": _flag("skip the comparison run without DeepEP"),
    "--reference": Meaning(
        text="a passing report whose answers without DeepEP stand in for that run", metavar="REPORT"
    ),
    "--tokens": Meaning(text="new tokens per request"),
    "--isl": Meaning(text="input tokens per request"),
    "--osl": Meaning(text="output tokens per request"),
    "--concurrency": Meaning(text="concurrency levels of the sweep"),
    "--no-sweep": _flag("skip the load sweep"),
    "--requests-per-level": Meaning(text="requests per sweep level, times its concurrency"),
    "--startup": _flag("plot server start-ups"),
    # Clusters.
    "--job": _choice("the job's kind: elastic-smoke or serve"),
    "--nodes": Meaning(text="nodes of the job or run"),
    "--gpus-per-node": Meaning(text="GPUs (one rank each) per node"),
    "--name": Meaning(text="the job's name"),
    "--k8s-kind": _choice("the Kubernetes workload: job or lws"),
    "--fabric-devices": Meaning(text="fabric devices per pod"),
    "--rdma-resource": Meaning(text="the RDMA device plugin's resource name"),
    "--shm-size": Meaning(text="/dev/shm size"),
    "--memory": Meaning(text="a pod's memory request"),
    "--print-command": _flag("print the node commands instead of a job"),
    "--serve-smoke": _choice("run the serve smoke against the endpoint: on, exit or off"),
    "--squashfs-dir": Meaning(text="Slurm: the node-local folder of pulled images"),
    "--env": Meaning(text="set an environment variable: KEY=VALUE (repeatable)"),
    "--instance-type": Meaning(text="the cloud instance type of the nodes"),
    "--host-network": _flag("k8s: the host's network"),
    "--privileged": _flag("k8s: privileged containers"),
    "--annotation": Meaning(text="k8s: a pod annotation KEY=VALUE"),
    "--node-selector": Meaning(text="k8s: a node label KEY=VALUE the pods need"),
    "--toleration": Meaning(text="k8s: a taint to tolerate"),
    "--topology-key": Meaning(text="k8s: the node label whose one domain holds every pod"),
    "--cpus-per-gpu": Meaning(text="CPUs requested per GPU"),
    "--model-revision": Meaning(text="the hub commit of the model's weights"),
    "--secret-env": Meaning(text="k8s: a variable from a Secret's key, NAME=SECRET:KEY"),
    "--secret-env-from": Meaning(text="k8s: every key of a Secret as a variable"),
    "--secret-file": Meaning(text="Slurm: a variable read from a node's file, NAME=/PATH"),
    "--storage-class": Meaning(text="k8s: the storage class of a shared claim"),
    "--pod-monitor": _flag("k8s: a PodMonitor for the server's metrics"),
    "--pod-monitor-label": Meaning(text="k8s: a label KEY=VALUE on the PodMonitor"),
    "--router-image": Meaning(text="the image of SGLang's router, by digest"),
    "--namespace": Meaning(text="k8s: a namespace"),
    "--replicas": Meaning(text="k8s: serving groups"),
    "--kustomization": _flag("k8s: a kustomize base beside the manifests"),
    "--disaggregation": _flag("serve: prefill and decode roles behind the router"),
    **{
        f"--{what}-storage": Meaning(text=f"where the {what} storage comes from", metavar="SPEC")
        for what in ("model", "cache", "results")
    },
    **{
        f"--{what}-mount": Meaning(text=f"where the container sees the {what} storage")
        for what in ("model", "cache", "results")
    },
    # AWS.
    "--project": Meaning(text="a CodeBuild project"),
    "--batch": _flag("a batch build: every target, then each one's smoke"),
    "--watch": _flag("follow the build and exit with its status"),
    "--source-version": Meaning(text="the commit to build"),
    "--region": Meaning(text="the AWS region"),
    "--smoke-fleet": Meaning(text="the CodeBuild fleet (Hopper, Blackwell) the smoke runs on", metavar="ARN"),
    "--no-smoke": _flag("no smoke tasks"),
    "--poll": Meaning(text="seconds between status reads"),
}


# Names retired so that one concept has one name: each lives on only as an old name kept one release
# (common.rename), never as an option of its own.
RETIRED: dict[str, str] = {
    "--nproc-per-node": "--gpus-per-node",
    "--gpus": "--gpus-per-node",
    "--nnodes": "--nodes",
    "--preset": "--profile",
}


def _takes(action: argparse.Action) -> str:
    return "flag" if action.nargs == 0 else "choice" if action.choices else "value"


def conflicts(uses: Iterable[tuple[str, argparse.Action]]) -> list[str]:
    """Each (command, option) that has no meaning here or breaks its meaning, in one line."""
    found = []
    for command, action in uses:
        for name in (n for n in action.option_strings if n.startswith("--")):
            meaning = MEANINGS.get(name)
            if name in RETIRED:
                found.append(f"{command} {name}: a retired name, one name per concept; fix: {RETIRED[name]}")
            elif meaning is None:
                found.append(f"{command} {name}: no meaning in epstack.commands.meanings; fix: add one")
            elif _takes(action) != meaning.takes:
                found.append(f"{command} {name}: takes a {_takes(action)}, its meaning a {meaning.takes}")
            elif meaning.metavar and (action.metavar or action.dest.upper()) != meaning.metavar:
                found.append(f"{command} {name}: metavar {action.metavar}, its meaning's {meaning.metavar}")
    return found
