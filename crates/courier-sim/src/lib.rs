//! courier-sim: Seeded, I/O-free simulations of delivery guarantees.
