-- What a voucher sells (seckill.Voucher): its price and face value in its
-- currency's minor units (fen, cents; 0 is free, and an unsaid value),
-- the ISO 4217 code of its currency, a subtitle, its terms of use and the
-- URL of its picture. Vouchers made before read price 0, value 0 and
-- currency '': the service's default currency (--currency), so that one
-- made before is free in whatever currency the service sells.
--
-- One statement: each MySQL statement commits on its own, so two would
-- leave half a migration when the second fails.

ALTER TABLE vouchers
    ADD COLUMN price      BIGINT        NOT NULL DEFAULT 0,
    ADD COLUMN face_value BIGINT        NOT NULL DEFAULT 0,
    ADD COLUMN currency   CHAR(3)       CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    ADD COLUMN subtitle   VARCHAR(200)  NOT NULL DEFAULT '',
    ADD COLUMN rules      VARCHAR(5000) NOT NULL DEFAULT '',
    ADD COLUMN image_url  VARCHAR(2048) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '',
    ADD CONSTRAINT vouchers_price_check CHECK (price >= 0),
    ADD CONSTRAINT vouchers_face_value_check CHECK (face_value >= 0);
