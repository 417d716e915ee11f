-- rw_side_read: the side of the read-write lock that rw_resume takes back.
local WRITE = false
