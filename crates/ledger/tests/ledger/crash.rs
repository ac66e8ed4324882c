//! Real OS processes: two writers on one SQLite file, and `kill -9` at random points.
