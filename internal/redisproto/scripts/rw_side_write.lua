-- rw_side_write: the side of the read-write lock that rw_resume takes back.
local WRITE = true
