// C++ leaks: a lost std::list and a lost std::map (each one strongly connected component: the
// nodes point back into the container object), a lost std::vector of lost strings. Possibly
// lost blocks (docs/reference.md §3, memcheck with --leak-check-heuristics=none): an array
// from new[] of a type with a destructor, held by the pointer new[] returned (8 bytes past the
// block's start, after the element count), and an object of a class with two bases held by a
// pointer to its second base.
#include <list>
#include <map>
#include <string>
#include <vector>

#include "leak.h"

struct Tracked {
    long value = 0;
    ~Tracked() { value = -1; }
};

struct First {
    virtual ~First() {}
    long a = 1;
};
struct Second {
    virtual ~Second() {}
    long b = 2;
};
struct Both : First, Second {
    long c = 3;
};

Tracked *array;
Second *second;
std::list<int> *kept_list;

static NOINLINE void lose_list() {
    auto *l = new std::list<int>;
    for (int i = 0; i < 5; i++) l->push_back(i);
    opaque(l);
}

static NOINLINE void lose_map() {
    auto *m = new std::map<int, int>;
    for (int i = 0; i < 7; i++) (*m)[i * 3] = i;
    opaque(m);
}

static NOINLINE void lose_strings() {
    auto *v = new std::vector<std::string>;
    v->reserve(3);
    for (int i = 0; i < 3; i++) v->push_back(std::string(40 + i, 'x'));
    opaque(v);
}

static NOINLINE void interior() {
    array = new Tracked[4];
    second = new Both;
    kept_list = new std::list<int>{1, 2, 3};
}

int main() {
    RUN_AND_WIPE(lose_list);
    RUN_AND_WIPE(lose_map);
    RUN_AND_WIPE(lose_strings);
    RUN_AND_WIPE(interior);
    return 0;
}
