-- Reserved for the change that numbers its migration 0010, merged
-- beside this one: versions have no gaps. It does nothing, and goes when
-- that migration comes.
SELECT 1;
