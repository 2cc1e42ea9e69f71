"""The tree in ``netdisco.exceptions``' docstring is the real class tree, drawn right."""

from __future__ import annotations

import inspect
import re

import netdisco.exceptions as exceptions
from netdisco.exceptions import NetdiscoError

#: one line of the tree: the drawing, the class name, what it says about it
LINE = re.compile(r"^(?P<prefix>(?:│   |    )*(?:├── |└── )?)(?P<name>[A-Z]\w*)(?P<rest>.*)$")


def drawn() -> list[tuple[str, str, str]]:
    """``(prefix, name, rest)`` of each line of the docstring's tree, root first."""
    doc = exceptions.__doc__ or ""
    lines = doc[doc.index("\nNetdiscoError\n") + 1 :].splitlines()
    found = []
    for line in lines:
        if not line.strip():
            break
        match = LINE.match(line)
        assert match, f"not a line of the tree: {line!r}"
        found.append((match["prefix"], match["name"], match["rest"]))
    return found


def drawn_parents() -> dict[str, str | None]:
    """Each class in the tree -> the class it is drawn under (None for the root)."""
    parents: dict[str, str | None] = {}
    path: list[str] = []  # the names from the root down to the last line's class
    for prefix, name, _ in drawn():
        depth = len(prefix) // 4
        assert depth <= len(path), f"{name} is indented past its parent"
        del path[depth:]
        assert name not in parents, f"{name} is drawn twice"
        parents[name] = path[-1] if path else None
        path.append(name)
    return parents


def real_classes() -> dict[str, type[Exception]]:
    return {
        name: cls
        for name, cls in vars(exceptions).items()
        if inspect.isclass(cls)
        and issubclass(cls, Exception)
        and cls.__module__ == exceptions.__name__
    }


def own_bases(cls: type) -> list[str]:
    return [base.__name__ for base in cls.__bases__ if base.__module__ == exceptions.__name__]


def test_the_tree_names_every_class_and_nothing_else() -> None:
    tree, real = set(drawn_parents()), real_classes()
    assert not real.keys() - tree, f"not in the docstring's tree: {sorted(real.keys() - tree)}"
    assert not tree - real.keys(), f"in the tree, not in the module: {sorted(tree - real.keys())}"
    assert len(real) >= 38
    classes = [c for c in vars(exceptions).values() if inspect.isclass(c)]
    others = [c for c in classes if c.__module__ == exceptions.__name__ and c not in real.values()]
    assert not others, f"classes that are not exceptions: {others}"


def test_each_class_is_drawn_under_its_base() -> None:
    for name, parent in drawn_parents().items():
        cls = real_classes()[name]
        assert own_bases(cls) == ([] if parent is None else [parent]), name


def test_every_class_descends_from_netdisco_error() -> None:
    for name, cls in real_classes().items():
        assert issubclass(cls, NetdiscoError), name
        assert NetdiscoError in cls.__mro__


def test_the_children_drawn_are_the_real_subclasses() -> None:
    """``__subclasses__`` agrees both ways (no class of ours is a subclass elsewhere)."""
    parents = drawn_parents()
    for name, cls in real_classes().items():
        drawn_children = {child for child, parent in parents.items() if parent == name}
        real = {sub.__name__ for sub in cls.__subclasses__() if sub.__module__ == cls.__module__}
        assert drawn_children == real, name


def test_a_second_builtin_base_is_named_in_its_line() -> None:
    for _, name, rest in drawn():
        for base in real_classes()[name].__bases__:
            if base.__module__ == "builtins" and base is not Exception:
                assert base.__name__ in rest, f"{name}'s line does not say it is a {base.__name__}"
    assert real_classes()["NetdiscoError"].__bases__ == (Exception,)


def test_the_drawing_is_consistent() -> None:
    """``└──`` marks a last child, ``│`` runs on exactly while siblings follow below."""
    lines = drawn()
    parents = drawn_parents()
    names = [name for _, name, _ in lines]

    def last_child(name: str) -> bool:
        siblings = [n for n in names if parents[n] == parents[name]]
        return siblings[-1] == name

    for prefix, name, _ in lines:
        ancestors: list[str] = []
        node = parents[name]
        while node is not None and parents[node] is not None:
            ancestors.insert(0, node)
            node = parents[node]
        expected = "".join("    " if last_child(a) else "│   " for a in ancestors)
        if parents[name] is not None:
            expected += "└── " if last_child(name) else "├── "
        assert prefix == expected, f"{name}: drawn {prefix!r}, expected {expected!r}"
