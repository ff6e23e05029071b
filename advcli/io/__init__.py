"""Parquet in and out: reading in chunks, Arrow <-> torch without copies, atomic writing."""
