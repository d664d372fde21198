//! Emulated Advanced Format drives: nbdkit behind nbdfuse behind a
//! direct-I/O loop device.
