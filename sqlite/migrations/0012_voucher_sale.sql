-- What a voucher sells (seckill.Voucher): its price and face value in its
-- currency's minor units (fen, cents; 0 is free, and an unsaid value),
-- the ISO 4217 code of its currency, a subtitle, its terms of use and the
-- URL of its picture. Vouchers made before read price 0, value 0 and
-- currency '': the service's default currency (--currency), so that one
-- made before is free in whatever currency the service sells.
--
-- SQLite adds one column a statement; the migration's transaction keeps
-- them together.

ALTER TABLE vouchers ADD COLUMN price INTEGER NOT NULL DEFAULT 0 CHECK (price >= 0);

ALTER TABLE vouchers ADD COLUMN face_value INTEGER NOT NULL DEFAULT 0 CHECK (face_value >= 0);

ALTER TABLE vouchers ADD COLUMN currency TEXT NOT NULL DEFAULT '' CHECK (length(currency) <= 3);

ALTER TABLE vouchers ADD COLUMN subtitle TEXT NOT NULL DEFAULT '' CHECK (length(subtitle) <= 200);

ALTER TABLE vouchers ADD COLUMN rules TEXT NOT NULL DEFAULT '' CHECK (length(rules) <= 5000);

ALTER TABLE vouchers ADD COLUMN image_url TEXT NOT NULL DEFAULT '' CHECK (length(image_url) <= 2048);
