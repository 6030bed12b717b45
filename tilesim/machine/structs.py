"""Small types for device code.

- A struct per kernel-facing object (LocalTensor, GlobalTensor, the queues), passed by value like a namedtuple,
  but a type of its own, so that it can have methods and ``tensor[offset]`` (a namedtuple's ``t[0]`` would be its
  first field), and type parameters (the element type, the build) that select what an instruction compiles to.
- A constant that is all type (:class:`ConstantType`): an element type, an operation, the mask placeholder. A
  kernel passes it around at no cost; what it selects is chosen when the kernel compiles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from numba import types
from numba.core import cgutils
from numba.core.imputils import lower_constant
from numba.core.pythonapi import NativeValue
from numba.extending import box, intrinsic, make_attribute_wrapper, models, register_model, typeof_impl, unbox


class ConstantType(types.Dummy):
    """The Numba type of one Python constant (``value``), which carries no data at run time."""

    def __init__(self, value: Any) -> None:
        self.value = value
        super().__init__(f"{type(self).__name__}({value!r})")

    @property
    def key(self) -> tuple[str, str]:
        # .get: a cache index that an older version of the type wrote unpickles without the attribute, and is
        # hashed before Numba finds its stamp stale and discards it
        """Numba's identity of the type (its equality, hash and cache key): the constant's class and repr."""
        v = self.__dict__.get("value")
        return type(v).__qualname__, repr(v)


def constant_type(pycls: type, cls: type[ConstantType]) -> type[ConstantType]:
    """Make ``cls`` the Numba type of the instances of ``pycls``: in compiled code (a global or a closure
    variable), as an argument from Python, and back."""
    register_model(cls)(models.OpaqueModel)
    typeof_impl.register(pycls)(lambda val, c: cls(val))
    lower_constant(cls)(lambda context, builder, ty, pyval: context.get_dummy_value())
    unbox(cls)(lambda typ, obj, c: NativeValue(c.context.get_dummy_value()))
    box(cls)(lambda typ, val, c: c.pyapi.unserialize(c.pyapi.serialize_object(typ.value)))
    return cls


class StructType(types.Type):
    """A device struct's Numba type: ``FIELDS`` (name, Numba type or the name of a type parameter) and the type
    parameters ``params`` (a tuple of Numba types) that tell one instance type from another."""

    FIELDS: tuple[tuple[str, Any], ...] = ()
    PARAMS: tuple[str, ...] = ()

    def __init__(self, *params: Any) -> None:
        self.params = params
        for n, p in zip(self.PARAMS, params, strict=True):
            setattr(self, n, p)
        super().__init__(f"{type(self).__name__.removesuffix('Type')}[{', '.join(map(str, params))}]")

    @property
    def key(self) -> tuple[Any, ...]:
        """Numba's identity of the type (its equality, hash and cache key): its type parameters."""
        return self.params

    def field_types(self) -> list[tuple[str, Any]]:
        """The fields with their Numba types, parameter names resolved: the members of the struct's data model."""
        return [(n, getattr(self, t) if isinstance(t, str) else t) for n, t in self.FIELDS]


def struct_type(cls: type[StructType]) -> type[StructType]:
    """Class decorator: register the data model and the field accessors of a :class:`StructType`."""
    class Model(models.StructModel):
        def __init__(self, dmm, fe_type):  # type: ignore[no-untyped-def]
            super().__init__(dmm, fe_type, fe_type.field_types())

    register_model(cls)(Model)
    for name, _ in cls.FIELDS:
        make_attribute_wrapper(cls, name, name)
    return cls


def constructor(cls: type[StructType], typing: Callable[..., tuple[Any, ...] | None]) -> Any:
    """A device function ``make(fields, marker)`` building a ``cls`` from the tuple of its fields in order;
    ``typing(field_types, marker_type)`` returns the type parameters (or None to refuse the arguments). The
    marker carries what only the type holds (an element type)."""

    @intrinsic
    def make(typingctx, fields, marker):  # type: ignore[no-untyped-def]
        if not isinstance(fields, types.BaseTuple) or len(fields) != len(cls.FIELDS):
            return None
        params = typing(tuple(fields), marker)
        if params is None:
            return None
        ty = cls(*params)
        want = [t for _, t in ty.field_types()]

        def codegen(context, builder, sig, llargs):  # type: ignore[no-untyped-def]
            values = cgutils.unpack_tuple(builder, llargs[0], len(cls.FIELDS))
            s = cgutils.create_struct_proxy(ty)(context, builder)
            for (name, _), v, at, wt in zip(ty.FIELDS, values, fields, want, strict=True):
                setattr(s, name, context.cast(builder, v, at, wt))
            return s._getvalue()

        return ty(fields, marker), codegen

    return make
