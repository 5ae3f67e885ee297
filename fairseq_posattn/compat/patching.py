"""How every repair replaces a fairseq function: once, keeping the original."""

MARK = "__fairseq_posattn_compat__"


def wrap_once(owner, name: str, wrap) -> None:
    """Replace ``owner.name`` by ``wrap(owner.name)`` unless ``wrap`` already
    did; several repairs may wrap one function, each once."""
    current = getattr(owner, name)
    applied = getattr(current, MARK, frozenset())
    key = f"{wrap.__module__}.{wrap.__qualname__}"
    if key not in applied:
        wrapper = wrap(current)
        # a classmethod is read through its bound method, whose attributes are its function's
        setattr(getattr(wrapper, "__func__", wrapper), MARK, applied | {key})
        setattr(owner, name, wrapper)
