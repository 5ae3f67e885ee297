"""Pure dependency-tree logic (depths, relative structural positions)."""
