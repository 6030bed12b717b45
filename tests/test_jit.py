"""tilesim.jit: Numba's njit without the cfunc wrapper, in every module of tilesim and kernels; 512-bit vectors on
a host with AVX-512, with results bitwise those of 256-bit ones."""

from __future__ import annotations

import hashlib
import importlib
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest
import tilesim.kernels as kernels
from numba.core.registry import CPUDispatcher, cpu_target

import tilesim
from tilesim.jit import PREFERS_512_BIT, DeviceDispatcher, njit

ROOT = Path(__file__).resolve().parents[1]
AVX512 = llvm.get_host_cpu_features().get("avx512f", False)
USER_SET = "NUMBA_CPU_FEATURES" in os.environ or "NUMBA_CPU_NAME" in os.environ  # the user's choice of codegen


@njit
def _plus_one(x):
    return x + 1


@njit(cache=False, host=True)
def _twice_plus_one(x):
    return 2 * _plus_one(x) - 1


def test_both_forms_compile_device_code_is_called_from_compiled_code_host_code_from_python():
    assert _twice_plus_one(2) == 5
    with pytest.raises(TypeError, match=r"test_jit\._plus_one is device code.*njit\(host=True\)"):
        _plus_one(2)
    assert isinstance(_plus_one, DeviceDispatcher) and _plus_one.targetoptions["no_cpython_wrapper"] is True
    assert type(_twice_plus_one) is CPUDispatcher and "no_cpython_wrapper" not in _twice_plus_one.targetoptions
    for f in (_plus_one, _twice_plus_one):
        assert f.targetoptions["no_cfunc_wrapper"] is True


def test_every_compiled_function_of_tilesim_and_kernels_skips_the_cfunc_wrapper():
    found = []
    for pkg in (tilesim, kernels):
        for info in pkgutil.iter_modules(pkg.__path__, pkg.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            mod = importlib.import_module(info.name)
            found += [(info.name, n, f) for n, f in vars(mod).items()
                      if isinstance(f, CPUDispatcher) and f.py_func.__module__ == info.name]
    assert len(found) > 100
    assert [(m, n) for m, n, f in found if not f.targetoptions.get("no_cfunc_wrapper")] == []


@njit(cache=False, host=True)
def _mul(d, a, b):
    for i in range(d.size):
        d[i] = a[i] * b[i]


def test_512_bit_vectors_where_the_host_has_avx512():
    assert PREFERS_512_BIT == (AVX512 and not USER_SET)
    features = cpu_target.target_context.codegen().magic_tuple()[2]
    assert features.endswith(",-prefer-256-bit") == PREFERS_512_BIT
    x = np.ones(256, np.float32)
    _mul(x, x, x)
    asm = _mul.inspect_asm(_mul.signatures[0])
    assert ("zmm" in asm) == PREFERS_512_BIT or USER_SET


_LEFT_ALONE = """
import os, numba
from numba.core import config
if "NUMBA_CPU_FEATURES" not in os.environ and "NUMBA_CPU_NAME" not in os.environ:
    numba.njit(lambda x: x + 1)(1)  # Numba's CPU target exists before tilesim is imported
before = config.CPU_FEATURES
import tilesim.jit
print(tilesim.jit.PREFERS_512_BIT, config.CPU_FEATURES == before)
"""


def test_a_user_feature_string_or_cpu_name_or_an_earlier_compile_is_left_alone():
    for extra in ({}, {"NUMBA_CPU_FEATURES": llvm.get_host_cpu_features().flatten()}, {"NUMBA_CPU_NAME": "generic"}):
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CPU_FEATURES", "NUMBA_CPU_NAME")} | extra
        out = subprocess.run([sys.executable, "-c", _LEFT_ALONE], cwd=ROOT, env=env, capture_output=True, text=True,
                             check=True)
        assert out.stdout.split() == ["False", "True"], (extra, out.stdout, out.stderr)


def _digest() -> tuple[bool, str]:
    """Whether this process prefers 512-bit vectors, and a hash of RmsNormGrad's and SwiGluGrad's bf16 outputs."""
    from conftest import rms_inputs

    rng = np.random.default_rng(11)
    h = hashlib.sha256()
    dy, x, rstd, gamma = rms_inputs(rng, (300, 1000), 1, "bfloat16")
    for a in kernels.rms_norm_grad(dy, x, rstd, gamma):
        h.update(a.tobytes())
    xs = rng.uniform(-12.0, 12.0, (64, 2000)).astype(x.dtype)
    h.update(kernels.swiglu_grad(dy[:64, :1000], xs, -1).tobytes())
    return PREFERS_512_BIT, h.hexdigest()


@pytest.mark.skipif(not AVX512 or USER_SET,
                    reason="needs an AVX-512 host and no NUMBA_CPU_FEATURES or NUMBA_CPU_NAME: the two widths")
def test_results_are_bitwise_those_of_256_bit_vectors():
    """RmsNormGrad and SwiGluGrad in bf16 (the casts to and from bf16 around the fp32 Exp, Div, Mul and the
    reduction trees), compiled with 512-bit vectors here and with LLVM's default 256-bit ones in a process given
    the host's feature string. One dtype, because that process compiles its kernels cold (its feature string
    keys other cache entries)."""
    env = {**os.environ, "NUMBA_CPU_FEATURES": llvm.get_host_cpu_features().flatten()}
    code = "import sys; sys.path.insert(0, 'tests'); from test_jit import _digest; print(*_digest())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    assert _digest() == (True, out.stdout.split()[1]) and out.stdout.split()[0] == "False"
