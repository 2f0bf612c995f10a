# A program nobody here wrote: perl, losing thirty cycles of two hashes (each holds the
# other), then building a list it keeps. Its shared hash keys are 42-byte blocks whose last
# word is half slack (slack.c), which kept a lost block reachable for heaptui in about one
# run in three, depending on where ASLR put the heap.
#
# Both tools give perl a different environment (valgrind adds LD_PRELOAD, LD_LIBRARY_PATH
# and GLIBCXX_FORCE_NEW; the agent's runs HEAPTUI_* and LD_PRELOAD), which perl copies into
# %ENV at start: emptied first, so that both heaps hold the same blocks.
%ENV = ();
for my $i (1 .. 30) {
    my $a = {};
    my $b = { a => $a, pad => "x" x 200 };
    $a->{b} = $b;
}
my @keep = map { "keep$_" } 1 .. 1000;
print scalar(@keep), "\n";
