"""Planning: the spec, the inventory, env rules and the matrix of cells (spec → plan)."""
