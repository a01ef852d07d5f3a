package main

// sysSyncfs is syncfs(2) (the stdlib syscall package lacks the name).
const sysSyncfs = 267
