// Package faults is the tests' fault harness: Redis servers of a test's own
// (processes it kills, pauses and restarts), a Redis Cluster and a Sentinel
// deployment it fails over, network namespaces it partitions, a TCP proxy
// it takes down, a small disk it fills, and database sessions it makes
// read-only. Tests use it to see what the code does when something fails
// under it.
//
// What it needs beyond the services package testenv gives (redis-server,
// root for namespaces and disks) fails the test when the CI environment
// variable is set, and skips it otherwise, saying what is missing.
package faults
