//go:build race

package main

// raceEnabled says the tests run with the race detector: the seckill binary
// they run is built with it too.
const raceEnabled = true
