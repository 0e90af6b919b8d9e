package http

import "github.com/seckill/seckill"

// adminServices are what the admin API and page call.
type adminServices struct {
	deadLetters seckill.DeadLetterAdmin
	stats       seckill.StatsSource
	reconciler  *seckill.Reconciler
}
