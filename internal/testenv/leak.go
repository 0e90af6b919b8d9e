package testenv

import "go.uber.org/goleak"

// LeakIgnores are the goroutines goleak must not count in a package whose
// tests use a Redis Cluster: a rueidis Cluster client refreshes its view of
// the Cluster after a failover, and closes the connection of a node that
// left it, from goroutines that outlive Close by seconds.
func LeakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	}
}
