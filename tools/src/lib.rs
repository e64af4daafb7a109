//! ethbcast tools (placeholder).
