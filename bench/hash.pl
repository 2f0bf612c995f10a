# The real heap of bench/snapshot_cost.sh: perl building a hash of N keys (default 1.5M), each
# value a one-element array holding a string: a hash key, an array body and a string buffer
# per key, so 1.5M keys give about 4.6M malloc blocks and 400 MB of heap in one thread.
# Prints how long building took ("built S s"), then "ready", then sleeps until killed.
use strict;
use Time::HiRes qw(time);
my $n = shift // 1_500_000;
my $t = time;
my %h;
$h{"key$_"} = ["value$_"] for 1 .. $n;
$| = 1;
printf "built %.3f s\n", time - $t;
print "ready\n";
sleep 1_000_000;
