//! Linux raw Ethernet I/O for ethbcast (placeholder).
