package http

// adminServices are what the admin API and page call.
type adminServices struct {
	deadLetters DeadLetterAdmin
	stats       StatsSource
	reconciler  Reconciler
	refunds     RefundAdmin
	refused     RefusedPaymentAdmin
}
