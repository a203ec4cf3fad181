/** The fluent Java API users write graphs with. */
module dev.gatun.dsl {
    requires transitive dev.gatun.ir;

    exports dev.gatun.dsl;
}
