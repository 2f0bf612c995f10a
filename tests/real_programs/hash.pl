# Perl building a hash of N keys (heaptui's real-program test and benchmark:
# tests/real_programs.rs, bench/real_programs.sh). At its peak it prints "keys: N" and reads
# one line from stdin, where the driver takes its snapshot (a closed or empty stdin goes on at
# once); then a pass over the values, and it ends when stdin does.
use strict;
use warnings;

$| = 1;
my $n = shift // die "usage: perl hash.pl N\n";
my %h;
$h{"key$_"} = "value$_" for 1 .. $n;
print "keys: ", scalar(keys %h), "\n";
my $go = <STDIN>;
my $bytes = 0;
$bytes += length for values %h;
print "value bytes: $bytes\n";
1 while <STDIN>;
