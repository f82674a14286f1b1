"""Facts about the stack, written once. Everything else derives from these and the pins.

Which wheel names a CUDA major means, the version floors between components, the OS each CUDA image
tag names, and which distributions bring their own deep_ep. pins (through its properties), render,
guard, predict, build and the smoke read them here; the templates get them through render.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Standard library only: the smoke imports this on bare GPU hosts.

# DeepEP V2 uses NCCL's GIN device API, first shipped in NCCL 2.30.4 (build and run time).
DEEPEP_V2_MIN_NCCL = "2.30.4"
# NCCL keeps its ABI within a major (libnccl.so.2 for every 2.x), so the images may install an NCCL
# above the one torch pins: torch and DeepEP link libnccl.so.2, and the guard checks the one loaded.
# Another major is another library. torch's own pin is its wheel's requirement on NCCL_WHEEL_STEM-cuNN.
NCCL_ABI_MAJOR = 2
NCCL_WHEEL_STEM = "nvidia-nccl"
# NCCL GIN over EFA first shipped in aws-ofi-nccl 1.21 (its doc/gin-getting-started.md).
EFA_GIN_MIN_OFI_NCCL = "1.21.0"
# NCCL's GIN types (src/include/nccl_device/core.h; 2.30.7 knows 0, 2, 3, 4): the host proxy, IB GPU-
# initiated (GDAKI), and EFA GPU-initiated (EFA-GDA), which arrives with NCCL 2.31.2, the floor
# aws-ofi-nccl 1.21's GIN guide states for GIN over EFA at all.
GIN_PROXY, GIN_GDAKI, GIN_EFA_GDA = "2", "3", "5"
EFA_GDA_MIN_NCCL = "2.31.2"
# DeepEP's dispatch/combine SM count (get_theoretical_num_sms, deep_ep/buffers/elastic.py) is never below
# this for a buffer built without prefer_overlap_with_compute, as SGLang's and the smoke's are. At
# d4f41e4 its RDMA rate comes from `ibstat`, which lists no EFA device: 0, and across nodes the model
# divides by it (ZeroDivisionError; DeepEP PR #734, open). EFA jobs across nodes pass this count instead,
# in SGLang's own variable (its dispatcher's num_sms), which the smoke reads too.
DEEPEP_MIN_SMS_WITHOUT_OVERLAP = 64
DEEPEP_NUM_SMS_ENV = "SGLANG_DEEPEP_V2_NUM_SMS"
# DeepEP commits whose NCCL device communicator still requires strong and VA signals, which EFA-GDA
# has neither of (the GIN guide: set both to false), so they cannot use GIN type 5.
DEEPEP_REFS_WITHOUT_EFA_GDA = (
    "d4f41e4e93602a15e95f55f6ee8df8f1aaa0e4bb",
    "dd758caf451848bd150e1046af3d0a73e5fff38d",
)

# Each GPU architecture (TORCH_CUDA_ARCH_LIST spelling) -> the first CUDA release whose nvcc targets it,
# and the last one that still does (None: still supported). From NVIDIA's CUDA features archive (12.8
# added sm_100/101/120, 12.9 sm_103/121 and the family-specific "f" targets, 13.0 renamed sm_101 to
# sm_110, added sm_88 and dropped everything below Turing) and clang's Min/MaxVersionForOffloadArch
# (clang/lib/Basic/Cuda.cpp), checked 2026-12-01.
_BEFORE_TURING = "12.9"
GPU_ARCHS: dict[str, tuple[str, str | None]] = {
    **{arch: ("7.0", _BEFORE_TURING) for arch in ("5.0", "5.2", "5.3")},
    **{arch: ("8.0", _BEFORE_TURING) for arch in ("6.0", "6.1", "6.2")},
    "7.0": ("9.0", _BEFORE_TURING),
    "7.2": ("9.1", _BEFORE_TURING),
    "7.5": ("10.0", None),
    "8.0": ("11.0", None),
    "8.6": ("11.1", None),
    "8.7": ("11.4", None),
    "8.8": ("13.0", None),
    "8.9": ("11.8", None),
    "9.0": ("11.8", None),
    "9.0a": ("12.0", None),
    **{arch: ("12.8", None) for arch in ("10.0", "10.0a", "12.0", "12.0a")},
    **{arch: ("12.8", "12.9") for arch in ("10.1", "10.1a")},
    "10.1f": ("12.9", "12.9"),
    **{
        arch: ("12.9", None)
        for arch in ("10.0f", "10.3", "10.3a", "10.3f", "12.0f", "12.1", "12.1a", "12.1f")
    },
    **{arch: ("13.0", None) for arch in ("11.0", "11.0a", "11.0f")},
}
# The CUDA majors epstack knows the wheel names of (nvidia-nccl-cu12, nvidia-nccl-cu13, ...).
SUPPORTED_CUDA_MAJORS = (12, 13)
# The toolkit distributions versioned with the CUDA release itself (13.0.x for CUDA 13.0: the runtime,
# the compiler and what it reads), as CUDA 13 names them (CUDA 12's carry -cu12). One CUDA per image:
# the locks hold each at the pinned release's minor, unless pins.env's CUDA_MINOR_EXCEPTIONS names it,
# and the guard checks them. Libraries with versions of their own (cuBLAS 13.1, cuFFT 12.0, ...) are
# what torch pins. Without the constraint, humming-kernels (which sglang 0.5.23 requires) brought
# nvidia-cuda-nvcc 13.5 beside CUDA_HOME's 13.0.
CUDA_RELEASE_WHEELS = (
    *("nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-nvjitlink", "nvidia-cuda-nvcc", "nvidia-cuda-crt"),
    *("nvidia-nvvm", "nvidia-cuda-cccl", "nvidia-cuda-cupti", "nvidia-nvtx"),
)
# Distributions published once per CUDA major (<stem>-cu12, <stem>-cu13) that a requirement brings
# whatever the image's major: nvidia-cutlass-dsl 4.8.0 requires its cu12 libraries always and its cu13
# ones with an extra, and its loader (cutlass/_mlir/_mlir_libs/__init__.py) binds the flavour that is
# installed. nixl 1.5.1 (the module SGLang imports) requires nixl-cu12 and nixl-cu13 both and imports the
# one torch's CUDA major names. The locks exclude the other majors' flavours (235 MB of cutlass-dsl and
# a 69 MB nixl-cu12 wheel in a CUDA 13 image).
NIXL = "nixl"
CUDA_FLAVOURED_STEMS = ("nvidia-cutlass-dsl-libs", NIXL)
_CUDA_MAJOR_SUFFIX = re.compile(r"-cu(\d+)$")


def cuda_flavour(stem: str, major: int) -> str:
    """A distribution's build for one CUDA major: nixl, 13 -> nixl-cu13."""
    return f"{stem}-cu{major}"


def cuda_flavours(stem: str) -> tuple[str, ...]:
    """Its builds for every CUDA major epstack knows: nixl -> nixl-cu12, nixl-cu13."""
    return tuple(cuda_flavour(stem, major) for major in SUPPORTED_CUDA_MAJORS)


def nccl_wheel(name: str) -> bool:
    """Whether a distribution is an NCCL wheel of any CUDA major (nvidia-nccl-cu12, nvidia-nccl-cu13)."""
    return _CUDA_MAJOR_SUFFIX.search(name) is not None and _CUDA_MAJOR_SUFFIX.sub("", name) == NCCL_WHEEL_STEM


def other_cuda_major(name: str, major: int) -> bool:
    """Whether a distribution name carries another CUDA major than `major` (nvidia-foo-cu12 in 13)."""
    match = _CUDA_MAJOR_SUFFIX.search(name)
    return match is not None and int(match[1]) != major


# The OS a CUDA image tag ends in (nvidia/cuda:13.0.3-devel-ubuntu24.04) -> its glibc, which is the
# newest manylinux tag a wheel may carry to install there, and its Ubuntu codename.
IMAGE_OS_GLIBC = {"ubuntu24.04": "2.39", "ubuntu22.04": "2.35"}
IMAGE_OS_CODENAME = {"ubuntu24.04": "noble", "ubuntu22.04": "jammy"}
IMAGE_MACHINE = "x86_64"

# Distributions that install a top-level deep_ep package of their own (sglang requires the first).
DEEP_EP_PROVIDERS = ("sgl-deep-ep", "deep-ep")
# What DeepEP's setup.py builds with (torch 2.14 needs setuptools < 82). Checked 2026-11-29.
DEEPEP_BUILD_REQUIREMENTS = ("setuptools==81.0.0", "wheel==0.48.0", "ninja==1.13.2")

# The CUDA image flavour whose only CUDA library is cudart: the served image starts from it, as the venv's
# nvidia wheels carry every other library torch loads (the runtime flavour adds 1.7 GB of them again).
CUDA_BASE_FLAVOUR = "base"
# What the served image keeps of the CUDA toolkit, copied from the devel image into CUDA_HOME: what the
# JITs that compile at first use run and read, from their own code at the pinned versions. DeepEP
# (csrc/jit/compiler.hpp), DeepGEMM (deep_gemm/cuda_helpers.py) and FlashInfer (flashinfer/jit/
# cpp_ext.py) run $CUDA_HOME/bin/nvcc; Triton runs its own ptxas and the host's gcc. Paths are relative
# to CUDA_HOME, a trailing / marks a folder. Everything else of the toolkit stays in the devel image.
CUDA_JIT_TOOLKIT: tuple[tuple[str, str], ...] = (
    ("bin/nvcc", "the compiler driver every nvcc JIT runs"),
    ("bin/nvcc.profile", "where nvcc finds nvvm, the headers and the libraries"),
    ("bin/cudafe++", "nvcc's C++ front end"),
    ("bin/ptxas", "nvcc's PTX assembler"),
    ("bin/fatbinary", "nvcc packs each object's cubins"),
    ("bin/nvlink", "nvcc's device linker (FlashInfer's modules that link device code)"),
    ("bin/cuobjdump", "DeepEP's JIT dumps each kernel's SASS"),
    ("bin/crt/", "nvcc's host link stubs"),
    ("nvvm/", "cicc and libdevice: nvcc's NVVM back end"),
    ("targets/x86_64-linux/include/", "the CUDA headers every nvcc JIT includes ($CUDA_HOME/include)"),
    ("targets/x86_64-linux/lib/stubs/", "libcuda.so for FlashInfer's -lcuda, and the driver stub"),
)

# Patches (by sha256) that read NCCL GIN signals in GDAKI's memory layout: right only where the
# fabric's pinned GIN type is GDAKI (docs/deepep-patches.md; DeepEP PR #706 on the proxy layout).
PATCHES_NEEDING_GDAKI = {
    "fbde7fef0cd154a090f3a150a55bb0300c4c364800f485cf27361031bb25c961": "vLLM's GIN barrier patch",
}


@dataclass(frozen=True, kw_only=True)
class ImageTarget:
    """The interpreter and platform an image installs Python packages for."""

    python_version: str  # 3.12
    platform: str  # uv's --python-platform, e.g. x86_64-manylinux_2_39


@dataclass(frozen=True, kw_only=True)
class CudaWheels:
    """PyPI names of the CUDA-major-specific wheels the images install."""

    major: int
    nccl: str  # nvidia-nccl-cu13
    nvshmem: str  # nvidia-nvshmem-cu13
    nixl: str  # nixl-cu13: the KV transfer engine's build for this major (NIXL_VERSION)
    release: tuple[str, ...]  # CUDA_RELEASE_WHEELS as this major names them
    foreign: tuple[str, ...]  # CUDA_FLAVOURED_STEMS' flavours for the other majors


def release(version: str) -> tuple[int, ...]:
    """2.30.4 -> (2, 30, 4), for comparing with a floor above."""
    return tuple(int(part) for part in version.split("."))


def cuda_major(cuda_version: str) -> int:
    """13.0.3 -> 13"""
    return int(cuda_version.split(".", maxsplit=1)[0])


def cuda_wheels(cuda_version: str) -> CudaWheels:
    """The wheel names for the CUDA major of `cuda_version`; ValueError for a major epstack does not know."""
    major = cuda_major(cuda_version)
    if major not in SUPPORTED_CUDA_MAJORS:
        raise ValueError(
            f"CUDA {major} is not supported; fix: use CUDA {' or '.join(map(str, SUPPORTED_CUDA_MAJORS))}"
        )
    suffix = "" if major >= 13 else f"-cu{major}"  # CUDA 13's toolkit wheels dropped the suffix
    nccl, nvshmem = f"{NCCL_WHEEL_STEM}-cu{major}", f"nvidia-nvshmem-cu{major}"
    return CudaWheels(
        major=major,
        nccl=nccl,
        nvshmem=nvshmem,
        nixl=cuda_flavour(NIXL, major),
        release=tuple(f"{name}{suffix}" for name in CUDA_RELEASE_WHEELS),
        foreign=tuple(
            cuda_flavour(stem, other)
            for stem in CUDA_FLAVOURED_STEMS
            for other in SUPPORTED_CUDA_MAJORS
            if other != major
        ),
    )


def base_packages(cuda_version: str, torch: str, nccl: str, nvshmem: str) -> dict[str, str]:
    """The Python distributions the base layer pins (name -> version); no upper layer may move them."""
    wheels = cuda_wheels(cuda_version)
    return {"torch": torch, wheels.nccl: nccl, wheels.nvshmem: nvshmem}


def image_os(image_ref: str) -> str:
    """The OS suffix of a CUDA image tag: nvidia/cuda:13.0.3-devel-ubuntu24.04@sha256:... -> ubuntu24.04."""
    tag = image_ref.split("@", 1)[0].rsplit(":", 1)[-1]
    return tag.rsplit("-", 1)[-1]


def image_flavour(image_ref: str) -> str:
    """The flavour of a CUDA image tag: nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:... -> base."""
    tag = image_ref.split("@", 1)[0].rsplit(":", 1)[-1]
    return tag.split("-", 1)[-1].rsplit("-", 1)[0]


def wheel_platform(os_name: str) -> str:
    """uv's --python-platform for an image OS: ubuntu24.04 -> x86_64-manylinux_2_39."""
    glibc = IMAGE_OS_GLIBC[os_name].replace(".", "_")
    return f"{IMAGE_MACHINE}-manylinux_{glibc}"


def arch_problem(arch: str, cuda_version: str) -> str | None:
    """Why nvcc of `cuda_version` cannot build for `arch` (e.g. 10.3a), or None when it can."""
    known = GPU_ARCHS.get(arch)
    if known is None:
        return f"{arch} is not a GPU architecture nvcc knows"
    first, last = known
    cuda = release(cuda_version)[:2]
    if cuda < release(first):
        return f"arch {arch} needs CUDA {first} or newer"
    if last is not None and cuda > release(last):
        return f"arch {arch} was dropped after CUDA {last}"
    return None


def archs_for(cuda_version: str) -> tuple[str, ...]:
    """Every arch nvcc of `cuda_version` builds for, oldest first."""
    buildable = (arch for arch in GPU_ARCHS if arch_problem(arch, cuda_version) is None)
    return tuple(sorted(buildable, key=lambda arch: (release(arch.rstrip("af")), arch)))
