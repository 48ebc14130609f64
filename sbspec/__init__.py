"""The normative clause catalog of sbconform: data in TOML, loaded and linted here.

``load_catalog()`` reads ``vocabulary.toml`` and ``clauses/*.toml`` and checks every
entry (ids, levels, areas, capabilities, tags, and that each quote really appears in the
seed it cites). Standard library only.
"""

from .catalog import Catalog, CatalogError, Clause, Discrepancy, Source, load_catalog

__all__ = ["Catalog", "CatalogError", "Clause", "Discrepancy", "Source", "load_catalog"]
