//! Unit tests of the connection machinery.
