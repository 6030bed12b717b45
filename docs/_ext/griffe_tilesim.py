"""A griffe extension for tilesim's API pages (loaded by mkdocstrings, see mkdocs.yml).

griffe reads the sources without importing them. Three things of tilesim's only exist at run time, so this
extension imports the modules of ``tilesim.machine`` and takes them from there:

- the vector instructions, made by ``vector._instruction`` (``add = _instruction("Add", ...)``): each is a function
  whose docstring and signature are generated; here they become functions with that docstring and signature;
- the namedtuples (``TQue``, ``DataCopyParams``, ...) with their ``__doc__`` set after the call: classes with their
  fields as the signature;
- the constants assigned by tuple unpacking (``VECIN, VECOUT, VECCALC = 1, 2, 3``), which griffe does not see:
  attributes with their values.

It also turns the reST roles of the docstrings of tilesim, kernels/ and tiling/ (``:class:`X```,
``:func:`~a.b```, ...) into links: an optional cross-reference (a link where the page set documents the target,
plain code elsewhere) when the target exists, plain code and an INFO line ("tilesim docs: unresolved reference")
when it names nothing in tilesim.
And it makes the rest of the reST read as Markdown: a paragraph's closing ``::`` becomes ``:`` (the indented block
after it is a code block in Markdown too), a ``<`` outside code is escaped (``SetFlag<event>`` would be an HTML
tag), and a list that starts right under a paragraph line gets the blank line Markdown needs.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from typing import Any

import griffe

_log = logging.getLogger("mkdocs.plugins.tilesim_docs")
# The packages whose docstrings are converted: tilesim, and the repository's kernels/ and tiling/ (installed as
# tilesim.kernels and tilesim.tiling, read by griffe from the checkout under their directory names).
_PACKAGES = ("tilesim", "kernels", "tiling")
_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|data|attr|exc|obj|const):`(~?)([\w.]+)(?:\(\))?`")
_LITERAL_BLOCK = re.compile(r"(?<=\S)::$", re.MULTILINE)
_CODE_SPAN = re.compile(r"(``.+?``|`[^`]+`)")


def _parameters(fn: Any) -> griffe.Parameters:
    kinds = {inspect.Parameter.POSITIONAL_ONLY: griffe.ParameterKind.positional_only,
             inspect.Parameter.POSITIONAL_OR_KEYWORD: griffe.ParameterKind.positional_or_keyword,
             inspect.Parameter.VAR_POSITIONAL: griffe.ParameterKind.var_positional,
             inspect.Parameter.KEYWORD_ONLY: griffe.ParameterKind.keyword_only,
             inspect.Parameter.VAR_KEYWORD: griffe.ParameterKind.var_keyword}
    return griffe.Parameters(*(
        griffe.Parameter(p.name, kind=kinds[p.kind],
                         default=None if p.default is inspect.Parameter.empty else repr(p.default))
        for p in inspect.signature(fn).parameters.values()))


def _runtime_object(name: str, value: Any, lineno: int | None) -> griffe.Object | None:
    """The griffe object of a module member griffe saw only as an attribute (or not at all)."""
    doc = inspect.getdoc(value)
    if inspect.isfunction(value):
        return griffe.Function(name, lineno=lineno, endlineno=lineno, parameters=_parameters(value),
                               docstring=griffe.Docstring(doc, lineno=lineno) if doc else None)
    if inspect.isclass(value) and issubclass(value, tuple) and hasattr(value, "_fields"):
        cls = griffe.Class(name, lineno=lineno, endlineno=lineno, bases=["tuple"],
                           docstring=griffe.Docstring(doc, lineno=lineno) if doc else None)
        defaults = value._field_defaults
        init = griffe.Function("__init__", lineno=lineno, endlineno=lineno, parameters=griffe.Parameters(
            griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword),
            *(griffe.Parameter(f, kind=griffe.ParameterKind.positional_or_keyword,
                               default=repr(defaults[f]) if f in defaults else None) for f in value._fields)))
        cls.set_member("__init__", init)
        return cls
    return None


def _from_runtime(module: griffe.Module) -> None:
    """Replace or add the members of ``module`` that exist only at run time (see the module docstring)."""
    runtime = importlib.import_module(module.path)
    for name, value in vars(runtime).items():
        if name.startswith("_") or inspect.ismodule(value):
            continue
        member = module.members.get(name)
        if member is None:  # bound by tuple unpacking
            if isinstance(value, (int, float, str)) and not isinstance(value, bool):
                attr = griffe.Attribute(name, value=repr(value), lineno=None, endlineno=None)
                attr.labels.add("module-attribute")
                module.set_member(name, attr)
            continue
        if member.is_alias or not member.is_attribute:
            continue
        made = _runtime_object(name, value, member.lineno)
        if made is not None:
            module.set_member(name, made)


def _resolve(collection: griffe.ModulesCollection, obj: griffe.Object, target: str) -> str | None:
    """The path ``target`` names seen from ``obj`` (as Sphinx looks a role's target up), or None."""
    module = obj.module.path
    scopes = [obj.path, obj.parent.path if obj.parent else module, module, "tilesim", ""]
    if obj.parent is not None and obj.parent.parent is not None:
        scopes.insert(2, obj.parent.parent.path)
    for scope in scopes:
        path = f"{scope}.{target}" if scope else target
        try:
            found = collection.get_member(path)
        except Exception:  # noqa: BLE001  (a missing name, or an alias to something outside tilesim)
            continue
        if found is None:
            continue
        try:
            return found.final_target.path if found.is_alias else found.path
        except Exception:  # noqa: BLE001
            return path
    return None


def _convert(collection: griffe.ModulesCollection, obj: griffe.Object) -> None:
    doc = obj.docstring
    if doc is None:
        return

    def link(m: re.Match[str]) -> str:
        short, target = m.group(1), m.group(2)
        shown = target.rsplit(".", 1)[-1] if short else target
        path = _resolve(collection, obj, target)
        if path is None:
            _log.info("tilesim docs: unresolved reference %r in the docstring of %s", m.group(0), obj.path)
            return f"`{shown}`"
        return f'<autoref identifier="{path}" optional><code>{shown}</code></autoref>'

    doc.value = _ROLE.sub(link, _markdown(doc.value))


def _markdown(text: str) -> str:
    """reST prose as Markdown (see the module docstring); code spans and indented code blocks are left alone."""
    out: list[str] = []
    for line in _LITERAL_BLOCK.sub(":", text).split("\n"):
        if not line.startswith("    "):
            line = "".join(part if k % 2 else part.replace("<", "&lt;")
                           for k, part in enumerate(_CODE_SPAN.split(line)))
            if line.startswith("- ") and out and out[-1].strip() and not out[-1].startswith(("- ", "  ")):
                out.append("")
        out.append(line)
    return "\n".join(out)


def _walk(obj: griffe.Object) -> Any:
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _walk(member)


class TilesimDocs(griffe.Extension):
    """Run-time members of ``tilesim.machine``, and the reST roles of tilesim, kernels/ and tiling/ as links (see
    the module docstring). A role in one package may name another (``kernels`` names ``tilesim.AclnnError`` and
    ``tiling.softmax``), so the first of them to load loads the others, and the roles are converted once all three
    are in the collection."""

    def __init__(self) -> None:
        super().__init__()
        self._converted: set[str] = set()

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name not in _PACKAGES:
            return
        if pkg.name == "tilesim":
            machine = pkg.members["machine"]
            for module in [machine, *(m for m in machine.members.values() if not m.is_alias and m.is_module)]:
                _from_runtime(module)
        for name in _PACKAGES:
            if name not in loader.modules_collection:
                loader.load(name)  # its own on_package runs here
        if not all(name in loader.modules_collection for name in _PACKAGES):
            return
        for name in _PACKAGES:
            if name not in self._converted:
                self._converted.add(name)
                for obj in _walk(loader.modules_collection[name]):
                    _convert(loader.modules_collection, obj)
