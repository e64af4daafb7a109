//! pnet backend (placeholder).
