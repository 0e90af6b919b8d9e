package mysql

// endVoucherSQL ends a voucher's sale at the first argument unless it ends
// earlier ([sqlstore.Store.EndVoucher]: the end twice, then the voucher),
// and moves the start to the new end when it is after it (the sale ended
// before it began): the window is then empty, ended.
const endVoucherSQL = `UPDATE vouchers SET end_time = LEAST(end_time, ?), begin_time = LEAST(begin_time, end_time, ?) WHERE id = ?`
