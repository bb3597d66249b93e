"""Importers: one command a source shape (`prep import coco|pairs|...`), each a kind of samples
packed on the run driver, so an import has every guarantee `prep samples` has."""
