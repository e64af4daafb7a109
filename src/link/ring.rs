//! ring backend (placeholder).
