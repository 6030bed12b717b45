"""aclnn status codes and the errors tilesim raises.

The codes are the ones in CANN's ``op_errno.h``: a caller that prototypes host code here sees the same numbers
it will see from the real ``aclnn*GetWorkspaceSize``.
"""

from __future__ import annotations

from typing import Any

ACLNN_SUCCESS = 0
ACLNN_ERR_PARAM_NULLPTR = 161001
ACLNN_ERR_PARAM_INVALID = 161002
ACLNN_ERR_RUNTIME_ERROR = 361001
ACLNN_ERR_INNER = 561000
ACLNN_ERR_INNER_INFERSHAPE_ERROR = 561001
ACLNN_ERR_INNER_TILING_ERROR = 561002
ACLNN_ERR_INNER_FIND_KERNEL_ERROR = 561003


class AclnnError(ValueError):
    """An error with an aclnn status code in ``.status``; the message names the parameter and the rule."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"[{status}] {message}")
        self.status = status
        self.message = message


class UbOverflowError(AclnnError):
    """A UB plan that does not fit the core's Unified Buffer (a tiling error, 561002)."""

    def __init__(self, message: str) -> None:
        super().__init__(ACLNN_ERR_INNER_TILING_ERROR, message)


class CheckError(AclnnError):
    """Violations found by checked mode while a kernel ran (on the NPU: an exception at run time, 361001).

    ``.violations`` holds the run's findings (:class:`tilesim.checks.violations.Violation`, up to a limit per core),
    ``.reports`` their one-line messages, ``.total`` how many were found in all; the message shows the first and
    counts the rest.
    """

    def __init__(self, violations: list[Any], total: int | None = None) -> None:
        total = len(violations) if total is None else total
        more = f" (and {total - 1} more)" if total > 1 else ""
        super().__init__(ACLNN_ERR_RUNTIME_ERROR, str(violations[0]) + more)
        self.violations = violations
        self.reports = [str(v) for v in violations]
        self.total = total


def null_error(param: str) -> AclnnError:
    """The error of a required argument given as None: status 161001 (ACLNN_ERR_PARAM_NULLPTR), naming
    ``param``."""
    return AclnnError(ACLNN_ERR_PARAM_NULLPTR, f"{param} must not be None (nullptr)")


def invalid(param: str, rule: str) -> AclnnError:
    """The error of an invalid input: status 161002 (ACLNN_ERR_PARAM_INVALID), its ``.message``
    ``"<param>: <rule>"``. An op function raises it for what its aclnn API refuses in GetWorkspaceSize: a dtype,
    a shape, a value outside its range. Returned, not raised: ``raise invalid("x", "must not be empty")``."""
    return AclnnError(ACLNN_ERR_PARAM_INVALID, f"{param}: {rule}")


def tiling_error(param: str, rule: str) -> AclnnError:
    """The error of a tiling the kernel cannot run: status 561002 (ACLNN_ERR_INNER_TILING_ERROR), its
    ``.message`` ``"<param>: <rule>"``. A tiling function raises it for a free choice it refuses (a core count, a tile
    size, a buffer count) or an input its tiling cannot split. Returned, not raised:
    ``raise tiling_error("buffer_num", "must be 1 or 2")``."""
    return AclnnError(ACLNN_ERR_INNER_TILING_ERROR, f"{param}: {rule}")
