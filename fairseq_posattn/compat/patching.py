"""How every repair replaces a fairseq function: once, keeping the original."""

MARK = "__fairseq_posattn_compat__"


def wrap_once(owner, name: str, wrap) -> None:
    """Replace ``owner.name`` by ``wrap(owner.name)`` unless a repair already did."""
    current = getattr(owner, name)
    if not getattr(current, MARK, False):
        wrapper = wrap(current)
        setattr(wrapper, MARK, True)
        setattr(owner, name, wrapper)
