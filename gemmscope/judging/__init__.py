"""The check: the recipe tables (recipes), each GEMM's verdict against what was asked (verify) and
the verdict's figures (figures)."""
