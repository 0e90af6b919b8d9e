package sqlite

// endVoucherSQL ends a voucher's sale at the first argument unless it ends
// earlier ([sqlstore.Store.EndVoucher]: the end twice, then the voucher),
// and moves the start to the new end when it is after it (the sale ended
// before it began): the window is then empty, ended.
const endVoucherSQL = `UPDATE vouchers SET end_time = MIN(end_time, ?1), begin_time = MIN(begin_time, end_time, ?1) WHERE id = ?3`
