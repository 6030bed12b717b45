"""What every op's error tests check of a refused call, shared by the test modules: the op API raises the
documented status with a message naming the parameter and the rule, the aclnn form's GetWorkspaceSize returns
the same status and message, and neither writes the outputs (filled with 7 beforehand) nor changes the inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from tilesim.kernels import aclnn

from tilesim import AclnnError


def assert_refused(call: Callable[[], Any], get_workspace_size: Callable[[], Any], status: int,
                   words: Sequence[str], inputs: Sequence[Any], outs: Sequence[np.ndarray]) -> None:
    """``call()`` (the op API) and ``get_workspace_size()`` (the aclnn form) both refuse with ``status``; the
    message has every one of ``words``; ``inputs`` (None allowed) are unchanged and ``outs`` still all 7."""
    before = [None if a is None else np.array(a, copy=True) for a in inputs]
    with pytest.raises(AclnnError) as e:
        call()
    assert e.value.status == status, e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
    for o in outs:
        assert np.all(o.astype(np.float64) == 7), "an output was written"
    for a, b in zip(inputs, before, strict=True):
        if a is not None:
            np.testing.assert_array_equal(a, b)
    assert tuple(get_workspace_size()) == (status, 0, None)
    assert aclnn.get_recent_err_msg() == e.value.message
    for o in outs:
        assert np.all(o.astype(np.float64) == 7), "an output was written"
