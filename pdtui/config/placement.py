"""The kinds of place a service runs on, each declared by its target: the config's core knows none of them.

A target declares its settings as a :class:`PlacementKind`: its top-level section of places (``hosts:``) and the
model of one place, the keys that place a service on it (``host:``) and the core's :class:`ServiceConfig`
subclassed with its keys of a service (``unit:``) and their validation. It registers the kind (:func:`register`)
as it registers its target, and :class:`Placements` composes the kinds' models with the core's into the models a
config is validated against and its JSON Schema is made from. The built-in targets register theirs when
``pdtui.targets`` is imported; a test hands its own to :func:`~pdtui.config.loader.parse_config`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from pdtui.config.errors import Wording, did_you_mean, fail, show_key
from pdtui.config.places import Place
from pdtui.config.schema import NAMED, Claim, Deployment, ServiceConfig, named_entries, required_one_of


@dataclass(frozen=True, eq=False)
class PlacementKind:
    """A kind of place services run on, as its target declares it (see the module's docstring); a kind whose
    errors need words of its own, or that checks a deployment beyond its services' places, subclasses it.

    ``section``: its section of places, each a ``place``; ``service``: the core's service with its keys;
    ``keys``: the keys that place a service on it, the one naming its place first; ``placing``: a service on it in
    an error's words ("a unit on a host"); ``required``: the keys of ``service`` a service on it must give;
    ``needed_for``: why a config gives its section, when it is not the first kind's ("for Slurm jobs");
    ``scheduled``: a scheduler picks its node when it starts, so its address is not known before;
    ``items``: how an error names an entry of a list of a service (its key's) that is the kind's.
    """

    section: str
    place: type[Place]
    service: type[ServiceConfig]
    keys: tuple[str, ...]
    placing: str
    required: tuple[str, ...] = ()
    needed_for: str = ""
    scheduled: bool = False
    items: Mapping[str, str] = field(default_factory=dict)

    @property
    def what(self) -> str:
        """One of its places, in an error's words: ``host``."""
        return self.place.KIND

    @property
    def settings(self) -> tuple[str, ...]:
        """Its own keys of a service besides those that place one: a service on another kind gives none of them."""
        return tuple(key for key in self.service.model_fields
                     if key not in ServiceConfig.model_fields and key not in self.keys)

    def fill(self, entry: Mapping[str, Any]) -> Mapping[str, Any]:
        """A service's entry placed on it, its ``host`` (the place its commands run on) filled."""
        place = entry.get(self.keys[0])
        return {**entry, "host": place} if isinstance(place, str) else entry

    def prepare(self, deployment: Any, name: str, entry: Mapping[str, Any]) -> Mapping[str, Any]:
        """A service's entry before it is validated, with what the deployment around it fills (``deployment`` is
        the top level's name, as the file gives it)."""
        return entry

    def where(self, svc: ServiceConfig) -> str:
        """Its place of ``svc`` in an error's words: ``host 'gpu0'``."""
        return f"{self.what} '{svc.host}'"

    def conflict(self, name: str, key: str, theirs: str, other: PlacementKind) -> PydanticCustomError:
        """A service ``name`` placed both on it (by ``key``) and on an earlier kind (by ``theirs``)."""
        return fail(f"service '{name}' has a {theirs} and a {key}, expected one of them ({other.placing}, or "
                    f"{self.placing})", key, on="key")

    def refuse(self, svc: ServiceConfig, key: str) -> PydanticCustomError | None:
        """Its words for a service on it that gives ``key``, another kind's setting; None: the owner's words."""
        return None

    def stray(self, svc: ServiceConfig, key: str, placed: PlacementKind) -> PydanticCustomError | None:
        """Its words for its setting ``key`` given to a service ``placed`` on another kind; None: the core's."""
        return None

    def check_service(self, deployment: Deployment, name: str, svc: ServiceConfig) -> None:
        """``svc``, a service on it, against the deployment: its place is one of the section's."""
        places = getattr(deployment, self.section)
        if svc.host not in places:
            raise fail(f"unknown {self.what} {show_key(svc.host)}, expected one of {', '.join(places) or '(none)'}"
                       f"{did_you_mean(svc.host, places)}", "services", name, self.keys[0])

    def claims(self, svc: ServiceConfig) -> tuple[Claim, ...]:
        """What ``svc`` holds of its place that no other service may (a unit's name, a job's)."""
        return ()

    def check_deployment(self, deployment: Deployment) -> None:
        """The whole deployment (each server over several nodes followed by its ranks), once every service passed."""


@dataclass(frozen=True, eq=False)
class Placements:
    """The kinds a config may place services on, in their order, and the models their settings and the core's make."""

    kinds: tuple[PlacementKind, ...]

    def with_kind(self, kind: PlacementKind) -> Placements:
        """These kinds and ``kind`` (a target of a test's own, say)."""
        return _known((*self.kinds, kind))

    @cached_property
    def sections(self) -> dict[str, PlacementKind]:
        """Each kind by its section of places."""
        return {kind.section: kind for kind in self.kinds}

    def kind_of(self, data: Mapping[str, Any], *, strict: bool = True) -> PlacementKind | None:
        """The kind a service's entry is placed on (by its keys); two kinds are the later's error (``strict``)."""
        placed = [(kind, key) for kind in self.kinds for key in kind.keys if key in data]
        if not placed:
            return None
        first, theirs = placed[0]
        for kind, key in placed[1:] if strict else ():
            if kind is not first:
                raise kind.conflict(str(data.get("name")), key, theirs, first)
        return first

    def section_of(self, model: type[Place]) -> str:
        """The section whose places are ``model``s."""
        return next(kind.section for kind in self.kinds if issubclass(kind.place, model))

    @cached_property
    def wording(self) -> Wording:
        """How errors name the entries of the config's sections and of the kinds' lists of a service."""
        return Wording({"services": "service", **{kind.section: kind.what for kind in self.kinds}},
                       {key: said for kind in self.kinds for key, said in kind.items.items()})

    @cached_property
    def service(self) -> type[ServiceConfig]:
        """The core's service with every kind's keys (the first kind's first, as the schema lists them)."""
        keys = [key for kind in self.kinds for key in kind.keys]
        first = self.kinds[0]
        placings = ", or ".join(kind.placing for kind in self.kinds)
        namespace = {
            "__module__": ServiceConfig.__module__, "__qualname__": "ServiceConfig",
            "__doc__": f"One service of the deployment ({placings}) and how to tell it is ready.",
            "placements": self,
            "EXPECTED": f"a mapping of service settings ({', '.join((first.keys[0], *first.required))}, role, ...)",
            "model_config": ConfigDict(json_schema_extra=required_one_of(*keys, filled=("host", "timeout", "ready"))),
        }
        bases = tuple(kind.service for kind in reversed(self.kinds))
        return type("ServiceConfig", bases, namespace)

    @cached_property
    def deployment(self) -> type[Deployment]:
        """The core's deployment with every kind's section of places, its services :attr:`service`'s."""
        annotations: dict[str, Any] = {"services": _section(self.service, "service")}
        namespace: dict[str, Any] = {
            "__module__": Deployment.__module__, "__qualname__": "Deployment",
            "__doc__": f"The whole deployment: {', '.join(self.sections)}, services, and the order to bring them up in.",
            "placements": self, "services": Field(json_schema_extra=NAMED),
            "model_config": ConfigDict(json_schema_extra=required_one_of(*self.sections)),
        }
        for kind in self.kinds:
            annotations[kind.section] = _section(kind.place, kind.what)
            namespace[kind.section] = Field(default_factory=dict, json_schema_extra=NAMED)
        return type("Deployment", (Deployment,), {**namespace, "__annotations__": annotations})


def _section(model: type[BaseModel], what: str) -> Any:
    """The annotation of a section of named ``model``s (``what`` one is, in an error's words)."""
    mapping: Any = dict
    return Annotated[mapping[str, model], named_entries(what)]


_registered: list[PlacementKind] = []


def register(kind: PlacementKind) -> None:
    """Make ``kind`` one of the kinds every config may place services on (a target does, when it is imported)."""
    if kind not in _registered:
        _registered.append(kind)


def registered() -> Placements:
    """The kinds registered so far, in their order."""
    if not _registered:
        raise RuntimeError("no target has registered its settings of the config: import pdtui.targets first")
    return _known(tuple(_registered))


_cache: dict[tuple[PlacementKind, ...], Placements] = {}


def _known(kinds: Sequence[PlacementKind]) -> Placements:
    """One Placements for each set of kinds, so that its models are made once."""
    key = tuple(kinds)
    if key not in _cache:
        _cache[key] = Placements(key)
    return _cache[key]

