//! Shared helpers for the perftest programs.
