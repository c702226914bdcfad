"""The built-in experiments of ``fedopt sweep NAME``: one TOML file each (``fedopt list`` names them).

See :mod:`fedopt.sweep.config` for the schema. Each file states, under ``[experiment]``, which
values come from the paper (``from_paper``) and which are fedopt's defaults where the paper is
silent (``defaults``), following ``specs/fednmap.md`` section 6 and ``specs/fedcanon.md`` section 4.
"""
