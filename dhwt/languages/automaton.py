"""The `automaton` family: a probabilistic finite automaton over symbol classes.

    start = "s"
    [states]
    s = [{emit = "c", to = "t", p = 0.5}, {emit = "d", to = "end", p = 0.5}]

Each transition emits one class and moves to a state or to "end". The automaton must be acyclic
(a cycle means unboundedly long strings, so no exact finite ground truth), so every string is
finite and the class-string distribution is enumerated exactly by expanding all paths. Several
paths may yield the same class string; their probabilities add up, and paths that reach one
state with one prefix are merged as they go, so the work follows the strings, not the paths
(twenty states each entered by two transitions emitting the same class make 2^20 paths and one
string).
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from dhwt.errors import DhwtError, brief
from dhwt.checks import (
    check_keys,
    need,
    need_kind,
    need_str,
    normalised,
    probability,
)
from dhwt.languages.classes import SymbolClass, read_classes
from dhwt.languages.enumeration import PAD, check_size, group_arange, row_keys

KEYS = ("family", "name", "description", "start", "classes", "states")
TRANSITION_KEYS = ("emit", "to", "p")
END = "end"
#: Most nodes of the subset automaton built to count the strings (each node is the set of
#: states some class prefix reaches: more nodes mean more distinct prefixes than that).
MAX_NODES = 1_000_000


def build(spec: dict) -> tuple[list[SymbolClass], np.ndarray, np.ndarray, None]:
    """(classes, class strings (n, L) with PAD past the end, probabilities, None: no split of
    its own) of an automaton spec."""
    check_keys(spec, KEYS, "an automaton spec")
    classes = read_classes(need(spec, "classes", "an automaton spec"), allow_maskable=True)
    class_ids = {c.name: i for i, c in enumerate(classes)}
    states = _read_states(need(spec, "states", "an automaton spec"), class_ids)
    start = need_str(need(spec, "start", "an automaton spec"), "'start'")
    if start not in states:
        raise DhwtError(f"start state {start!r} is not declared in [states] "
                        f"(declared: {brief(states, str)})")
    _check_graph(states, start, classes)
    n_strings, work = _enumeration_size(states, start, classes)
    check_size(n_strings, work)
    strings, probs = _enumerate(states, start, class_ids)
    return classes, strings, probs, None


def _read_states(table: object,
                 class_ids: dict[str, int]) -> dict[str, list[tuple[str, str, float]]]:
    """{state: [(emitted class, next state, p), ...]} with per-state probabilities summing to 1."""
    table = need_kind(table, dict, "'states'")
    if not table:
        raise DhwtError("the spec declares no states")
    states = {}
    for name, transitions in table.items():
        where = f"state {name!r}"
        need_str(name, "a state name")
        if name == END:
            raise DhwtError(f"{END!r} is the reserved final state; it cannot be declared")
        transitions = need_kind(transitions, list, f"the transitions of {where}")
        if not transitions:
            raise DhwtError(f"{where} has no transitions; every state must lead to {END!r}")
        read = []
        for i, entry in enumerate(transitions):
            at = f"transition {i} of {where}"
            entry = need_kind(entry, dict, at)
            check_keys(entry, TRANSITION_KEYS, at)
            emit = need_str(need(entry, "emit", at), f"'emit' of {at}")
            if emit not in class_ids:
                raise DhwtError(f"{at} emits undeclared class {emit!r} "
                                f"(declared: {brief(class_ids, str)})")
            to = need_str(need(entry, "to", at), f"'to' of {at}")
            if to != END and to not in table:
                raise DhwtError(f"{at} goes to undeclared state {to!r} (declared: "
                                f"{brief(table, str)}, or {END!r})")
            read.append((emit, to, probability(need(entry, "p", at), f"'p' of {at}")))
        probs = normalised([p for _, _, p in read], f"the transition probabilities of {where}")
        states[name] = [(emit, to, p) for (emit, to, _), p in zip(read, probs)]
    return states


def _check_graph(states: dict, start: str, classes: list[SymbolClass]) -> None:
    """Every state reachable, no cycle (strings must terminate), every class emitted somewhere."""
    graph = nx.DiGraph()
    graph.add_nodes_from(states)
    graph.add_edges_from((s, to) for s, ts in states.items() for _, to, _ in ts if to != END)
    unreachable = sorted(set(states) - nx.descendants(graph, start) - {start})
    if unreachable:
        raise DhwtError(f"states unreachable from {start!r}: {brief(unreachable, str)}")
    try:
        cycle = nx.find_cycle(graph, source=start)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        loop = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
        raise DhwtError(f"the automaton is non-terminating: it has the cycle {loop}; strings "
                        "must be finite, so the state graph must be acyclic")
    emitted = {emit for ts in states.values() for emit, _, _ in ts}
    silent = [c.name for c in classes if c.name not in emitted]
    if silent:
        raise DhwtError(f"class {silent[0]!r} is never emitted by any transition")


def _enumeration_size(states: dict, start: str,
                      classes: list[SymbolClass]) -> tuple[int, int]:
    """(symbol strings, sum of their length^2), exact, over the distinct class strings: by
    dynamic programming over the subset automaton (a node: the set of states one class prefix
    can reach, so paths emitting the same classes are one node), from the end backwards; a
    string of length l grows to l + 1, and (l + 1)^2 = l^2 + 2 l + 1.

    Examples:
        >>> from dhwt.languages.classes import SymbolClass
        >>> states = {"s": [("a", "t", 0.5), ("a", "u", 0.5)], "t": [("b", "end", 1.0)],
        ...           "u": [("b", "end", 1.0)]}  # two paths, one string "a b"
        >>> _enumeration_size(states, "s", [SymbolClass("a", ("a",), (1.0,), False),
        ...                                 SymbolClass("b", ("b1", "b2"), (0.5, 0.5), False)])
        (2, 8)
    """
    n_variants = {c.name: len(c.variants) for c in classes}
    start_node = frozenset([start])
    steps: dict[frozenset, list[tuple[str, bool, frozenset]]] = {}
    pending = [start_node]
    while pending:  # the subset automaton: per node, each class's (ends, next node)
        node = pending.pop()
        if node in steps:
            continue
        reached: dict[str, set[str]] = {}
        for state in node:
            for emit, to, _ in states[state]:
                reached.setdefault(emit, set()).add(to)
        steps[node] = [(emit, END in to, frozenset(to - {END})) for emit, to in reached.items()]
        if len(steps) > MAX_NODES:
            raise DhwtError(f"the automaton's class strings have more than {MAX_NODES:,} distinct "
                            "prefixes (each reaching its own set of states): too many to "
                            "enumerate exactly; use fewer or shorter strings")
        pending += [after for _, _, after in steps[node] if after and after not in steps]
    graph = nx.DiGraph()
    graph.add_nodes_from(steps)
    graph.add_edges_from((node, after) for node, out in steps.items() for _, _, after in out
                         if after)
    # per node: (number of symbol strings, sum of lengths, sum of squared lengths) to the end
    sums: dict[frozenset, tuple[int, int, int]] = {}
    for node in reversed(list(nx.topological_sort(graph))):
        total = [0, 0, 0]
        for emit, ends, after in steps[node]:
            n, s1, s2 = sums[after] if after else (0, 0, 0)
            v = n_variants[emit]  # the string ending here has length 1; the others grow by 1
            total[0] += v * (ends + n)
            total[1] += v * (ends + s1 + n)
            total[2] += v * (ends + s2 + 2 * s1 + n)
        sums[node] = (total[0], total[1], total[2])
    return sums[start_node][0], sums[start_node][2]


def _enumerate(states: dict, start: str,
               class_ids: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    """Expand all paths layer by layer (vectorised over the frontier), merging the paths that
    reach one state with one prefix; merge equal class strings."""
    names = list(states)
    index = {name: i for i, name in enumerate(names)}
    flat = [(index[s], class_ids[emit], index.get(to, -1), p)
            for s in names for emit, to, p in states[s]]
    emit = np.array([f[1] for f in flat], dtype=np.int32)
    goes_to = np.array([f[2] for f in flat])
    t_prob = np.array([f[3] for f in flat])
    count = np.bincount([f[0] for f in flat], minlength=len(names))
    first = np.cumsum(count) - count

    state = np.array([index[start]])
    prob = np.array([1.0])
    rows = np.zeros((1, 0), dtype=np.int32)
    finished: list[tuple[np.ndarray, np.ndarray]] = []
    while len(state):
        n_out = count[state]
        parent = np.repeat(np.arange(len(state)), n_out)
        t = np.repeat(first[state], n_out) + group_arange(n_out)
        rows = np.concatenate([rows[parent], emit[t][:, None]], axis=1)
        prob = prob[parent] * t_prob[t]
        state = goes_to[t]
        ended = state == -1
        finished.append((rows[ended], prob[ended]))
        rows, prob, state = rows[~ended], prob[~ended], state[~ended]
        keys = row_keys(np.column_stack([rows, state]), max(len(class_ids), len(names)))
        _, first_seen, inverse = np.unique(keys, return_index=True, return_inverse=True)
        if len(first_seen) < len(keys):
            rows, state = rows[first_seen], state[first_seen]
            prob = np.bincount(inverse, weights=prob)

    length = max(r.shape[1] for r, _ in finished)
    padded = np.concatenate([
        np.pad(r, ((0, 0), (0, length - r.shape[1])), constant_values=PAD) for r, _ in finished
    ])
    probs = np.concatenate([p for _, p in finished])
    keys = row_keys(padded, len(class_ids))
    _, first_seen, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return padded[first_seen], np.bincount(inverse, weights=probs)
