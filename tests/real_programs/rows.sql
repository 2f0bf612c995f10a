-- SQLite inserting @n rows, one INSERT statement each, in one transaction (heaptui's
-- real-program test and benchmark: tests/real_programs.rs, bench/real_programs.sh). Run as
-- `sqlite3 -cmd '.parameter set @n N' DB < rows.sql` in a scratch directory (the inserts are
-- written to inserts.sql there, then read back). The driver stops feeding input at the line
-- "-- peak" and takes its snapshot once "rows|N" is out.
.headers off
.mode list
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INTEGER, v REAL);
.once inserts.sql
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < @n)
SELECT printf('INSERT INTO t(name, grp, v) VALUES(''name-%d'', %d, %.1f);', x, x % 97, x * 0.5)
FROM c;
BEGIN;
.read inserts.sql
COMMIT;
SELECT 'rows', count(*) FROM t;
-- peak
CREATE INDEX t_name ON t(name);
SELECT grp, count(*), sum(v) FROM t GROUP BY grp ORDER BY grp LIMIT 5;
SELECT name FROM t WHERE name >= 'name-1999' ORDER BY name LIMIT 3;
SELECT count(DISTINCT name), max(length(name)) FROM t;
