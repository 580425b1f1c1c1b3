"""Classes that subclass a trainer library's class, built on first use (PEP 562).

An adapter module must import without its trainer library (TRL's ``transformers``, verl, Ray,
torch): the base class is imported only when the subclass is first asked for. A builder function
imports the library and defines the subclass inside itself; :meth:`LazyClasses.builds` makes it
build the class once and name it as a module-level class of the adapter module
(``__module__`` and ``__qualname__``), so what finds classes by their dotted name (verl's
``load_class_from_fqn`` and ``pkg://`` module paths, pickling by reference in Ray) finds it as a
module attribute: the module's ``__getattr__`` calls :meth:`LazyClasses.attribute`.

Usage::

    _lazy = LazyClasses(__name__)

    @_lazy.builds("CertifiedThing")
    def certified_thing_class() -> type[Any]:
        from library import Thing  # raises a RewardSealError naming the missing library

        class CertifiedThing(Thing): ...

        return CertifiedThing

    def __getattr__(name: str) -> Any:
        return _lazy.attribute(name)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["Builder", "LazyClasses"]

Builder = Callable[[], type[Any]]
"""A function that imports a trainer library and returns the subclass it defines."""


class LazyClasses:
    """The lazily built classes one module serves as its attributes."""

    def __init__(self, module: str) -> None:
        """``module``: the serving module's ``__name__``."""
        self.module = module
        self._builders: dict[str, Builder] = {}

    def builds(self, name: str) -> Callable[[Builder], Builder]:
        """Decorate the builder of the class served as ``name``: the decorated function builds
        it once (a failed build, such as a missing library, is tried again on the next call) and
        names it ``<module>.<name>``."""

        def decorate(build: Builder) -> Builder:
            @functools.cache
            def built() -> type[Any]:
                cls = build()
                cls.__module__ = self.module
                cls.__qualname__ = name
                return cls

            functools.update_wrapper(built, build)
            self._builders[name] = built
            return built

        return decorate

    def serves(self, name: str, build: Builder) -> None:
        """Serve ``name`` from another module's builder (a package re-exporting it), as that
        module names it."""
        self._builders[name] = build

    def attribute(self, name: str) -> Any:
        """The module attribute ``name``: its class, built on first access.

        Raises:
            AttributeError: the module serves no such class (the module ``__getattr__`` rule).
        """
        build = self._builders.get(name)
        if build is None:
            raise AttributeError(f"module {self.module!r} has no attribute {name!r}")
        return build()
