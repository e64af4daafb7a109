//! socket backend (placeholder).
